"""The training configuration: typed sections, layered from files and ``--set key=value`` overrides.

A run's configuration is resolved once, in this order, each layer overriding the one before:

1. the defaults of the dataclasses below;
2. the protocol of the dataset (``configs/protocols/paper.json`` for CUB, Cars196, SOP and folders: the
   paper's BN-Inception / RMSprop 1e-6 setting; ``bench.json`` for the bench: MobileNetV2 / Adam);
3. the method's file (``configs/methods/<method>.json``): its defaults, then its section for the dataset
   (the per-dataset loss hyperparameters of the protocol);
4. a user's ``--config FILE`` (JSON, the same nested layout);
5. command-line options (``--backbone``, ``--epochs``, ``--bgaugment``, …) and ``--set key=value``.

The resolved configuration is written to the run folder, and ``--resume`` reads it back from there, so a
resumed run cannot drift from the one it continues.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from bgbias.errors import OptionError


@dataclass(frozen=True)
class ModelConfig:
    """The network: backbone, its weights and the embedding head."""

    backbone: str = "mobilenet_v2"
    pretrained: bool = True
    weights: str | None = None
    embedding_dim: int = 128
    pooling: str = "avg"
    freeze_batchnorm: bool = True


@dataclass(frozen=True)
class OptimConfig:
    """Optimizer and learning rates of the three parameter groups (backbone, head, loss parameters)."""

    name: str = "adam"
    lr_backbone: float = 1e-4
    lr_head: float = 1e-3
    lr_loss: float = 1e-3
    weight_decay: float = 0.0
    momentum: float = 0.9
    grad_clip: float | None = None


@dataclass(frozen=True)
class DataConfig:
    """Batches and the training geometry; ``None`` geometry fields take the dataset's defaults."""

    batch_size: int = 32
    m_per_class: int = 4
    batches_per_epoch: int | None = None
    workers: int = 2
    resize: int | None = None
    crop: int | None = None
    crop_scale: tuple[float, float] = (0.16, 1.0)


@dataclass(frozen=True)
class BGAugmentConfig:
    """BGAugment: composite every training image (with probability ``p``) onto a train-pool background."""

    enabled: bool = False
    p: float = 1.0
    backgrounds: str | None = None
    masks: str | None = None


@dataclass(frozen=True)
class ScheduleConfig:
    """Epochs, model selection and early stopping.

    ``monitor`` is the validation MAP@R that picks the best checkpoint: ``auto`` means corrupted validation
    (backgrounds from the train pool) for BGAugment runs and clean validation otherwise, as in the seed.
    """

    epochs: int = 8
    patience: int = 15
    monitor: str = "auto"
    validate_untrained: bool = True


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a training run."""

    method: str = "multi_similarity"
    dataset: str = "bench"
    root: str | None = None
    protocol: str = "fixed"
    fold: int = 0
    seed: int = 0
    device: str = "auto"
    amp: str = "auto"
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    data: DataConfig = field(default_factory=DataConfig)
    bgaugment: BGAugmentConfig = field(default_factory=BGAugmentConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    loss: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return _jsonable(dataclasses.asdict(self))

    @property
    def monitor(self) -> str:
        """``clean`` or ``corrupted``: which validation MAP@R selects checkpoints."""
        if self.schedule.monitor == "auto":
            return "corrupted" if self.bgaugment.enabled else "clean"
        return self.schedule.monitor


# The free-form section: a method validates its own hyperparameters when it is built.
_FREE_FORM = {"loss"}


def _one_of(*choices: str) -> tuple[Callable[[Any], bool], str]:
    return (lambda value: value in choices), "one of " + ", ".join(choices)


# What each checked value must satisfy, with the words the error uses.
_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "protocol": _one_of("fixed", "cv4"),
    "amp": _one_of("auto", "off", "bf16", "fp16"),
    "model.pooling": _one_of("avg", "max", "avg+max"),
    "optim.name": _one_of("adam", "adamw", "rmsprop", "sgd"),
    "schedule.monitor": _one_of("auto", "clean", "corrupted"),
    "fold": ((lambda v: 0 <= v <= 3), "0, 1, 2 or 3"),
    "seed": ((lambda v: v >= 0), "0 or more"),
    "model.embedding_dim": ((lambda v: v >= 1), "at least 1"),
    "data.batch_size": ((lambda v: v >= 1), "at least 1"),
    "data.m_per_class": ((lambda v: v >= 1), "at least 1"),
    "data.batches_per_epoch": ((lambda v: v >= 1), "at least 1 (or null: one pass over the data)"),
    "data.workers": ((lambda v: v >= 0), "0 or more"),
    "bgaugment.p": ((lambda v: 0.0 <= v <= 1.0), "a probability in [0, 1]"),
    "optim.grad_clip": ((lambda v: v > 0), "positive (or null: no clipping)"),
    "schedule.epochs": ((lambda v: v >= 1), "at least 1"),
    "schedule.patience": ((lambda v: v >= 1), "at least 1"),
}


# --------------------------------------------------------------------------------------------- resolving
def resolve_config(
    method: str,
    dataset: str,
    *,
    config_file: str | os.PathLike[str] | None = None,
    options: dict[str, Any] | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> TrainConfig:
    """Layer defaults, protocol, method file, ``config_file``, ``options`` (dotted keys) and ``overrides``.

    ``overrides`` are ``key=value`` strings (``--set``); values are parsed as JSON where they parse
    (numbers, true/false, null, lists), else taken as strings.
    """
    layers: list[tuple[str, dict[str, Any]]] = [("protocol", protocol_layer(dataset))]
    method_file = method_layer(method, dataset)
    layers.append((f"method {method}", method_file))
    if config_file is not None:
        layers.append((os.fspath(config_file), read_config_file(config_file)))
    layers.append(("options", unflatten({"method": method, "dataset": dataset, **(options or {})})))
    layers.append(("--set", unflatten(dict(parse_override(text) for text in overrides))))
    merged = dataclasses.asdict(TrainConfig())
    for source, layer in layers:
        merged = merge(merged, layer, source)
    return config_from_dict(merged)


def protocol_layer(dataset: str) -> dict[str, Any]:
    """The protocol file of a dataset: ``paper`` for the real benchmarks and folders, ``bench`` for it."""
    return _package_json("protocols", "bench" if dataset == "bench" else "paper")


def method_layer(method: str, dataset: str) -> dict[str, Any]:
    """A method's defaults with its section for ``dataset`` applied (no file: nothing to add)."""
    try:
        data = _package_json("methods", method)
    except FileNotFoundError:
        return {}
    sections = data.pop("datasets", {})
    return merge(data, sections.get(dataset, {}), f"method {method} / {dataset}", strict=False)


def read_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A user's JSON configuration file (the nested layout of ``config.json`` in a run folder)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise OptionError("the configuration file does not exist", path=path, fix="check --config") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise OptionError(
            f"the configuration file is not valid JSON: {err}", path=path,
            fix="write the nested layout of a run's config.json, e.g. {\"optim\": {\"lr_head\": 0.001}}",
        ) from None
    if not isinstance(data, dict):
        raise OptionError("the configuration file must hold a JSON object", path=path, fix="wrap it in {...}")
    return data


def parse_override(text: str) -> tuple[str, Any]:
    """``"optim.lr_head=1e-3"`` → ``("optim.lr_head", 0.001)``; a value that is not JSON stays a string."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise OptionError(f"--set expects key=value, got {text!r}", fix="e.g. --set optim.lr_head=0.001")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value


def unflatten(flat: dict[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1}`` → ``{"a": {"b": 1}}``."""
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        node = nested
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise OptionError(f"{key!r} sets a value below a non-section", fix="check the key")
        node[leaf] = value
    return nested


def merge(base: dict[str, Any], layer: dict[str, Any], source: str, *, strict: bool = True) -> dict[str, Any]:
    """``base`` updated by ``layer``; with ``strict``, a key ``base`` does not know is an OptionError."""
    out = dict(base)
    for key, value in layer.items():
        if key in _FREE_FORM:
            if not isinstance(value, dict):
                raise OptionError(f"{source}: {key!r} must be a section", fix=f"write {key}.<name>=<value>")
            out[key] = {**out.get(key, {}), **value}
        elif strict and key not in out:
            raise _unknown_key(key, out, source)
        elif isinstance(out.get(key), dict) and isinstance(value, dict):
            out[key] = merge(out[key], value, source, strict=strict)
        else:
            out[key] = value
    return out


def config_from_dict(data: dict[str, Any]) -> TrainConfig:
    """A TrainConfig from its nested dict, with every value checked against its field's type."""
    return _build(TrainConfig, data, "")


def load_run_config(path: str | os.PathLike[str]) -> TrainConfig:
    """The resolved configuration saved in a run folder (``config.json``)."""
    merged = merge(dataclasses.asdict(TrainConfig()), read_config_file(path), os.fspath(path))
    return config_from_dict(merged)


# ------------------------------------------------------------------------------------------------ helpers
def _package_json(kind: str, name: str) -> dict[str, Any]:
    resource = resources.files("bgbias") / "configs" / kind / f"{name}.json"
    if not resource.is_file():
        raise FileNotFoundError(str(resource))
    return json.loads(resource.read_text(encoding="utf-8"))


def _unknown_key(key: str, known: dict[str, Any], source: str) -> OptionError:
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return OptionError(
        f"{source}: unknown configuration key {key!r}",
        fix=f"{hint}known keys here: {', '.join(sorted(known))}",
    )


def _build(cls: type, data: dict[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    values = {}
    for spec in dataclasses.fields(cls):
        key = f"{prefix}{spec.name}"
        value = data[spec.name]
        kind = hints[spec.name]
        if dataclasses.is_dataclass(kind):
            values[spec.name] = _build(kind, value, f"{key}.")
        else:
            values[spec.name] = _coerce(value, kind, key)
    config = cls(**values)
    _check_values(config, prefix)
    return config


def _coerce(value: Any, kind: Any, key: str) -> Any:
    """Check ``value`` against a field annotation (int, float, bool, str, optional, tuple, dict)."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        options = [arg for arg in typing.get_args(kind) if arg is not type(None)]
        if value is None:
            return None
        return _coerce(value, options[0], key)
    if origin is tuple:
        if not isinstance(value, list | tuple) or len(value) != len(typing.get_args(kind)):
            raise _bad_value(key, value, f"a list of {len(typing.get_args(kind))} numbers")
        return tuple(_coerce(v, t, key) for v, t in zip(value, typing.get_args(kind), strict=True))
    if origin is dict:
        if not isinstance(value, dict):
            raise _bad_value(key, value, "a section of key=value settings")
        return dict(value)
    if kind is bool:
        if not isinstance(value, bool):
            raise _bad_value(key, value, "true or false")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _bad_value(key, value, "an integer")
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _bad_value(key, value, "a number")
        return float(value)
    if kind is str:
        if not isinstance(value, str):
            raise _bad_value(key, value, "a string")
        return value
    raise TypeError(f"unsupported configuration type {kind!r} for {key}")


def _check_values(config: Any, prefix: str) -> None:
    for spec in dataclasses.fields(config):
        key = f"{prefix}{spec.name}"
        value = getattr(config, spec.name)
        if key in _RULES and value is not None:
            ok, expected = _RULES[key]
            if not ok(value):
                raise _bad_value(key, value, expected)


def _bad_value(key: str, value: Any, expected: str) -> OptionError:
    return OptionError(f"configuration {key} = {value!r} is invalid", fix=f"{key} must be {expected}")


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value
