"""The training configuration: typed sections, layered from files and ``--set key=value`` overrides.

Layers, each overriding the one before: section defaults and the method's recorded options, the dataset's
protocol file, the method's file (and its section for the dataset), ``--config FILE``, then command-line
options and ``--set`` (docs/training.md). Each layer is checked as it is applied, so an error names the file
(or ``--set``) a bad value comes from. A run's saved configuration is complete and is not a layer: nothing
fills in a missing key, so a resumed run cannot drift from the one it continues.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import json
import os
from collections.abc import Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field, ValidationError

from bgbias.data.registry import dataset_class
from bgbias.errors import OptionError
from bgbias.methods.limits import AtLeastOne, Fraction, Positive, ZeroOrMore, one_of
from bgbias.methods.registry import method_class, method_names
from bgbias.models.registry import backbone_names
from bgbias.options import AMP, MEMORY_FORMAT, Must, Settings, bad_value, choices
from bgbias.schema import UNKNOWN_KEY, explain_problem, shown

# What values must be beyond their types, with the words an error uses (None passes where allowed). Names of
# methods, datasets and backbones are checked against their registries (_check_config).
PathSetting = Annotated[str | None, Field(min_length=1), Must("a path (or null)")]


class ModelConfig(Settings):
    """The network: backbone, its weights and the embedding head. ``compile`` is off by default: on a CPU
    its first step took a minute and the compiled step was no faster (docs/benchmarks.md)."""

    backbone: str = "mobilenet_v2"
    pretrained: bool = True
    weights: PathSetting = None
    embedding_dim: AtLeastOne = 128
    pooling: one_of("avg", "max", "avg+max") = "avg"
    freeze_batchnorm: bool = True
    memory_format: one_of(*choices(MEMORY_FORMAT)) = "channels_last"
    compile: bool = False


class OptimConfig(Settings):
    """Optimizer and learning rates of the three parameter groups (backbone, head, loss parameters).

    ``warmup_epochs``: the backbone group does not step for the first N epochs (it still gets gradients, as
    in AVSL's code), so a new head settles before it moves a pretrained backbone.
    ``grad_clip_first_step_only`` clips the first optimiser step alone, as AVSL's code does.
    """

    name: one_of("adam", "adamw", "rmsprop", "sgd") = "adam"
    lr_backbone: Positive = 1e-4
    lr_head: Positive = 1e-3
    lr_loss: Positive = 1e-3
    weight_decay: ZeroOrMore = 0.0
    momentum: Fraction = 0.9
    grad_clip: Annotated[float | None, Field(gt=0), Must("positive (or null: no clipping)")] = None
    grad_clip_per_group: bool = False
    grad_clip_first_step_only: bool = False
    warmup_epochs: Annotated[int, Field(ge=0),
                             Must("0 or more (0: the backbone steps from the first epoch)")] = 0


def _scale_range(scale: tuple[float, float]) -> tuple[float, float]:
    if not 0 < scale[0] <= scale[1] <= 1:
        raise ValueError("crop_scale")
    return scale


class DataConfig(Settings):
    """Batches and the training geometry; ``None`` geometry fields take the dataset's defaults."""

    batch_size: AtLeastOne = 32
    m_per_class: AtLeastOne = 4
    batches_per_epoch: Annotated[int | None, Field(ge=1),
                                 Must("at least 1 (or null: one pass over the data)")] = None
    workers: Annotated[Annotated[int, Field(ge=0)] | Literal["auto"],
                       Must("0 or more, or auto (sized to the machine: bgbias.hardware)")] = "auto"
    resize: Annotated[int | None, Field(ge=1), Must("at least 1 (or null: the dataset's)")] = None
    crop: Annotated[int | None, Field(ge=1), Must("at least 1 (or null: the dataset's)")] = None
    crop_scale: Annotated[tuple[float, float], Field(strict=False), AfterValidator(_scale_range),
                          Must("[low, high] with 0 < low <= high <= 1")] = (0.16, 1.0)


class BGAugmentConfig(Settings):
    """BGAugment: composite every training image (with probability ``p``) onto a train-pool background."""

    enabled: bool = False
    p: Annotated[float, Field(ge=0, le=1), Must("a probability in [0, 1]")] = 1.0
    backgrounds: PathSetting = None
    masks: PathSetting = None


class ScheduleConfig(Settings):
    """Epochs, model selection and early stopping. ``monitor`` ``auto``: corrupted validation for BGAugment
    runs, clean otherwise (the paper's code). ``watch_test`` columns never select anything: they measure
    selection noise (docs/design.md).
    """

    epochs: AtLeastOne = 8
    patience: AtLeastOne = 15
    monitor: one_of("auto", "clean", "corrupted") = "auto"
    validate_untrained: bool = True
    watch_test: bool = False


class LogConfig(Settings):
    """``tensorboard``: every epoch's row also as scalars in ``<run>/tensorboard/``."""

    tensorboard: bool = False


class TrainConfig(Settings):
    """Everything that defines a training run; ``loss`` holds the method's options (its ``Options``)."""

    method: str = "multi_similarity"
    dataset: str = "bench"
    root: PathSetting = None
    protocol: one_of("fixed", "cv4") = "fixed"
    fold: Annotated[int, Field(ge=0, le=3), Must("0, 1, 2 or 3")] = 0
    seed: Annotated[int, Field(ge=0, lt=2**64), Must("a whole number in [0, 2**64)")] = 0
    device: Annotated[str, Field(pattern=r"^(auto|cpu|cuda(:\d+)?)$"),
                      Must("auto, cpu, cuda or cuda:N")] = "auto"
    amp: one_of(*choices(AMP)) = "auto"
    model: ModelConfig = ModelConfig()
    optim: OptimConfig = OptimConfig()
    data: DataConfig = DataConfig()
    bgaugment: BGAugmentConfig = BGAugmentConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    log: LogConfig = LogConfig()
    loss: dict[str, Any] = Field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @property
    def monitor(self) -> str:
        """``clean`` or ``corrupted``: which validation MAP@R selects checkpoints."""
        if self.schedule.monitor == "auto":
            return "corrupted" if self.bgaugment.enabled else "clean"
        return self.schedule.monitor


# Settings that name a file or folder: resolved to absolute paths, so a run's config.json means the same
# folders from any working folder.
PATH_KEYS = ("root", "model.weights", "bgaugment.masks", "bgaugment.backgrounds")


# --------------------------------------------------------------------------------------------- resolving
def resolve_config(
    method: str,
    dataset: str,
    *,
    config_file: str | os.PathLike[str] | None = None,
    options: dict[str, Any] | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> TrainConfig:
    """Layer defaults, protocol, method file, ``config_file``, ``options`` (dotted keys) and ``overrides``
    (``--set`` strings, :func:`parse_override`); paths become absolute."""
    method_cls = method_class(method)
    layers: list[tuple[str, Path | None, dict[str, Any]]] = [("protocol", None, protocol_layer(dataset))]
    layers += [(f"method {method}", None, layer) for layer in method_layers(method, dataset)]
    if config_file is not None:
        layers.append(("--config", Path(config_file), read_config_file(config_file)))
    command_line = {"method": method, "dataset": dataset, **(options or {})}
    layers.append(("command line", None, unflatten(command_line)))
    layers.append(("--set", None, unflatten(dict(parse_override(text) for text in overrides))))
    merged = {**TrainConfig().model_dump(), "loss": method_cls.recorded_options()}
    for source, path, layer in layers:
        with _naming(source, path):
            merged = _merged(merged, layer)
            _checked(merged)
            merged["loss"] = {**merged["loss"], **method_cls.check_options(layer.get("loss", {}))}
            if layer.get("method", method) != method or layer.get("dataset", dataset) != dataset:
                raise OptionError(
                    f"the method and dataset are chosen by --method and --dataset (here {method} on "
                    f"{dataset}), not by a setting",
                    fix="remove method and dataset from it, or pass --method / --dataset",
                )
    for key in PATH_KEYS:
        *sections, name = key.split(".")
        node = functools.reduce(dict.__getitem__, sections, merged)
        if node[name] is not None:
            node[name] = os.path.abspath(os.path.expanduser(node[name]))
    with _naming("the resolved configuration", None):
        return config_from_dict(merged)


def protocol_layer(dataset: str) -> dict[str, Any]:
    """The protocol file named by the dataset's layout (``paper`` or ``bench``)."""
    return _package_json("protocols", dataset_class(dataset).protocol)


def method_layers(method: str, dataset: str) -> list[dict[str, Any]]:
    """A method's defaults, then its section for ``dataset`` (no file: nothing to add)."""
    try:
        data = _package_json("methods", method)
    except FileNotFoundError:
        return []
    sections = data.pop("datasets", {})
    return [data, sections.get(dataset, {})]


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
                raise OptionError(f"{key!r} sets a value below {part!r}, which is set to a value itself",
                                  fix="set either the setting or values below it, not both")
        node[leaf] = value
    return nested


def config_from_dict(data: dict[str, Any]) -> TrainConfig:
    """A checked TrainConfig from a complete nested dict (a run's ``config.json``): no key may be missing."""
    config = _checked(data)
    missing = _missing(config)
    if missing:
        raise OptionError(
            f"missing settings: {', '.join(missing)}",
            fix="a run's config.json holds every setting: this one was not written by bgbias train, or was "
                "edited; restore the missing settings",
        )
    _check_config(config)
    return config


def load_run_config(path: str | os.PathLike[str]) -> TrainConfig:
    """The resolved configuration saved in a run folder (``config.json``), complete and checked."""
    data = read_config_file(path)
    with _naming("the run's configuration", path):
        return config_from_dict(data)


# ------------------------------------------------------------------------------------------------ helpers
@contextlib.contextmanager
def _naming(source: str, path: str | os.PathLike[str] | None) -> Iterator[None]:
    """Say in an OptionError raised while checking a layer which layer (and file) it comes from."""
    try:
        yield
    except OptionError as err:
        raise OptionError(f"{source}: {err.problem}", path=path if path is not None else err.path,
                          fix=err.fix) from None


def _merged(base: dict[str, Any], layer: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``layer``, section by section."""
    out = dict(base)
    for name, value in layer.items():
        both = isinstance(value, Mapping) and isinstance(base.get(name), Mapping)
        out[name] = _merged(base[name], value) if both else value
    return out


def _checked(data: Mapping[str, Any]) -> TrainConfig:
    """``data`` as a TrainConfig; an OptionError names the first unknown key or bad value."""
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as error:
        problem = explain_problem(error, TrainConfig)
    if problem.wanted == UNKNOWN_KEY:
        raise _unknown_key(problem.field, list(problem.known))
    raise bad_value(problem.field, problem.found, problem.wanted)


def _missing(settings: BaseModel, prefix: str = "") -> list[str]:
    """The dotted keys of ``settings`` that were not given (taken from their defaults)."""
    missing = []
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if name not in settings.model_fields_set:
            missing.append(f"{prefix}{name}")
        elif isinstance(value, BaseModel):
            missing += _missing(value, f"{prefix}{name}.")
    return missing


def _check_config(config: TrainConfig) -> None:
    """What no single value shows: registered names, the method's options, settings that must agree."""
    dataset_class(config.dataset)
    method_class(config.method).check_options(config.loss)
    method_class(config.method).check_training(
        config.loss, batch_size=config.data.batch_size, embedding_dim=config.model.embedding_dim)
    if config.model.backbone not in backbone_names():
        raise bad_value("model.backbone", shown(config.model.backbone),
                        "one of " + ", ".join(backbone_names()))
    batch, m = config.data.batch_size, config.data.m_per_class
    if batch % m:
        raise OptionError(
            f"data.batch_size = {batch} is not a multiple of data.m_per_class = {m} (images "
            "per class in a batch)", fix=f"choose a batch size that m divides, e.g. {max(1, batch // m) * m}",
        )
    if config.model.weights is not None and not config.model.pretrained:
        raise OptionError("model.weights is set, but model.pretrained = false asks for random "
                          "initialisation", fix="drop the weight file, or set model.pretrained=true")


def config_json_schema(method: str | None = None) -> dict[str, Any]:
    """The JSON Schema of a configuration file, for editors (``loss``: ``method``'s options, or all)."""
    schema = TrainConfig.model_json_schema()
    options = []
    for name in [method] if method is not None else method_names():
        model = method_class(name).options_model().model_json_schema()
        schema.setdefault("$defs", {}).update(model.pop("$defs", {}))
        options.append({**model, "title": f"{name} options"})
    schema["properties"]["loss"] = options[0] if len(options) == 1 else {"anyOf": options}
    if method is not None:
        schema["properties"]["method"] = {"const": method, "title": "Method"}
    return schema


def _package_json(kind: str, name: str) -> dict[str, Any]:
    resource = resources.files("bgbias") / "configs" / kind / f"{name}.json"
    if not resource.is_file():
        raise FileNotFoundError(str(resource))
    return json.loads(resource.read_text(encoding="utf-8"))


def _unknown_key(key: str, known: list[str]) -> OptionError:
    *_, name = key.rpartition(".")
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return OptionError(
        f"unknown configuration key {key!r}", fix=f"{hint}known keys here: {', '.join(sorted(known))}"
    )
