"""Typed settings: a value from JSON, the command line or a Python call checked against what it must be.

Configuration sections, a method's loss options and an attribution's options are declared as
:class:`Settings` (pydantic models): each field carries its default, its type, its limits and, as metadata,
:class:`Must` (what its value must be, in the words an error uses); :func:`setting_problem` reads a validation
error back in those words.

The arguments the commands and the Python API share (a split, a number of repeats, a seed, a path) are each
declared once as a :class:`Rule`: the command line builds its option types from it (``bgbias.cli``), and the
API checks what it is given with :func:`check_arguments`, which names each argument as its caller writes it
(``repeats=5`` in Python, ``--repeats 5`` on the command line). These rules live below every layer that reads
settings.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, GetJsonSchemaHandler, ValidationError
from pydantic.json_schema import JsonSchemaValue

from bgbias.errors import OptionError
from bgbias.schema import describe_type


class Settings(BaseModel):
    """A section of settings: strict JSON types (an int is taken for a float, nothing else is converted),
    finite numbers, read-only, and a key it does not declare refused."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid", allow_inf_nan=False)


@dataclass(frozen=True)
class Must:
    """Field metadata: what a setting's value must be beyond its type, in the words its error uses (and its
    JSON Schema's description, which editors show)."""

    words: str

    def __get_pydantic_json_schema__(self, core_schema: Any,
                                     handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {**handler(core_schema), "description": f"must be {self.words}"}


def must(settings: type[BaseModel], name: str) -> str | None:
    """The :class:`Must` words of field ``name``, if it has them."""
    return next((m.words for m in settings.model_fields[name].metadata if isinstance(m, Must)), None)


_LIMIT_ERRORS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal",
                           "literal_error", "string_pattern_mismatch", "string_too_short", "value_error"})
"""pydantic's errors of a value of the right type outside its field's limits (its :class:`Must` words)."""


@dataclass(frozen=True)
class SettingProblem:
    """The first problem of a validation error, in words: ``kind`` is ``unknown`` (a key the settings do
    not declare; ``known`` lists those they do), ``section`` (a section given as a single value), ``single``
    (a single setting given as a section), ``limit`` (the right type, outside the field's limits) or
    ``type``; ``key`` is dotted from the validated settings, ``value`` the one given, ``expected`` what it
    must be, ``annotation`` the field's type."""

    kind: str
    key: str
    value: Any
    expected: str
    known: tuple[str, ...] = ()
    annotation: Any = None


def setting_problem(error: ValidationError, settings: type[BaseModel],
                    data: Mapping[str, Any]) -> SettingProblem:
    """The first problem of ``error``, raised validating ``data`` as ``settings`` (nested settings are
    sections): the field it is in, walked down the sections, with the value ``data`` holds there."""
    first = error.errors(include_url=False)[0]
    model, value, parts = settings, data, []
    for part in first["loc"]:
        name = str(part)
        parts.append(name)
        value = value.get(name) if isinstance(value, Mapping) else None
        field = model.model_fields.get(name)
        if field is None:
            return SettingProblem("unknown", ".".join(parts), value, "", tuple(model.model_fields))
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            if not isinstance(value, Mapping):
                return SettingProblem("section", ".".join(parts), value,
                                      f'a section, e.g. {{"{next(iter(kind.model_fields))}": ...}}')
            model = kind
            continue
        key = ".".join(parts)
        if isinstance(value, Mapping) and not _is_mapping(kind):
            return SettingProblem("single", key, value, _type_words(kind), annotation=kind)
        words = must(model, name)
        if first["type"] in _LIMIT_ERRORS and words is not None:
            return SettingProblem("limit", key, value, words, annotation=kind)
        return SettingProblem("type", key, value, _type_words(kind), annotation=kind)
    raise AssertionError(f"no field in {first['loc']}")  # pragma: no cover (pydantic names a field)


def _is_mapping(kind: Any) -> bool:
    return getattr(kind, "__origin__", kind) is dict


def _type_words(kind: Any) -> str:
    """What a value of annotation ``kind`` is: a section for a dict, a list of numbers for a tuple of them,
    else the words of records (bgbias.schema)."""
    if _is_mapping(kind):
        return "a section of key=value settings"
    if getattr(kind, "__origin__", None) is tuple:
        return f"a list of {len(kind.__args__)} finite numbers"
    return describe_type(kind)


def bad_value(key: str, value: Any, expected: str) -> OptionError:
    """The error of a setting whose value is not what it must be."""
    return OptionError(f"setting {key} = {value!r} is invalid", fix=f"{key} must be {expected}")


@dataclass(frozen=True)
class Rule:
    """What one argument must be: its ``kind`` (``int``, ``float``, ``bool``, ``str``, or ``Path`` for a path
    given as text or path-like), its range or choices, and whether it may be ``None``; ``example`` is the
    value a fix suggests."""

    kind: type
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    optional: bool = False
    example: Any = None

    def expected(self) -> str:
        """What the argument must be, in words."""
        if self.choices:
            text = "one of " + ", ".join(self.choices)
        else:
            text = {int: "an integer", float: "a number", bool: "True or False", str: "a string",
                    Path: "a path (str or os.PathLike)"}[self.kind]
            if self.minimum is not None and self.maximum is not None:
                text += f" from {self.minimum} to {self.maximum}"
            elif self.minimum is not None:
                text += f" of at least {self.minimum}"
        return text + (", or None" if self.optional else "")


PATH = Rule(Path, optional=True, example="folder")
"""A file or folder that has a default."""
FLAG = Rule(bool, example=True)
SPLIT = Rule(str, choices=("test", "val", "all"), example="test")
"""The evaluated split: the paper's test split, or the validation split."""
CHOSEN_SPLIT = Rule(str, choices=("test", "val", "all"), optional=True, example="all")
"""The evaluated split of ``bgbias eval`` and ``audit``; None: ``all`` for a model bgbias did not train on
one's own images, else ``test`` (``engine.request.chosen_split``)."""
LEAKAGE_SPLIT = Rule(str, choices=("train", "test", "all"), example="test")
"""The split the leakage meter measures: before training, the training split is as telling as the test's."""
FILL = Rule(str, choices=("black", "tiled", "inpainted"), example="inpainted")
"""How an object's hole is filled (``bgbias.variants.variants.without_object``): black keeps the object's
silhouette (a shape a model can read), tiling and inpainting hide it."""
PROTOCOL = Rule(str, choices=("fixed", "cv4"), example="fixed")
"""The paper's fixed split, or 4-fold class-disjoint cross-validation."""
FOLD = Rule(int, minimum=0, maximum=3, example=0)
REPEATS = Rule(int, minimum=1, example=5)
"""Corrupted repeats: at least one (no corrupted sets at all is ``corrupted=False`` / leaving out
``--corrupted``)."""
SEED = Rule(int, minimum=0, example=0)
WORST_K = Rule(int, minimum=1, example=10)
MAX_MEMORY = Rule(int, minimum=1, optional=True, example=2**30)
"""Bytes that scoring's neighbour lists may take at once (bgbias.retrieval.metrics); None: 1 GiB."""
BATCH_SIZE = Rule(int, minimum=1, example=64)
WORKERS = Rule(int, minimum=0, optional=True, example=2)
"""Data-loader processes; None sizes them to the machine (bgbias.hardware)."""
AMP = Rule(str, choices=("auto", "off", "bf16", "fp16"), optional=True, example="off")
"""Autocast while a model embeds (a run's ``amp``, ``bgbias.engine.device.resolve_amp``): auto (bfloat16 on
CUDA, float32 on a CPU), off (float32), bf16 (CUDA, or a CPU that computes it natively), fp16 (CUDA); None:
the model's default."""
MEMORY_FORMAT = Rule(str, choices=("contiguous", "channels_last"), optional=True, example="contiguous")
"""The layout of a model's weights and inputs (a run's ``model.memory_format``); None: the model's default."""
DEVICE = Rule(str, example="cpu")
"""A torch device: auto, cpu, cuda or cuda:N (checked when it is resolved)."""
DEFAULT_MASK_MODEL = "u2netp"
"""The mask model of ``bgbias masks``, the API and a study on a real dataset when none is named: U²-Net's
small model, the one ``bgbias assets fetch`` installs (4.6 MB; the paper's ``u2net``, 176 MB, is fetched
only when named). Its masks go to ``masks/<dataset key>``, another model's beside them
(``data.items.default_masks_dir``)."""
MASK_DEVICE = Rule(str, choices=("auto", "cpu", "cuda"), example="cpu")
"""Where the mask network computes."""
MASK_BACKEND = Rule(str, choices=("auto", "torch", "onnxruntime"), example="torch")
"""What runs the mask network (``bgbias.saliency.sessions``): bgbias's PyTorch U²-Net, batched, or the ONNX
file in onnxruntime; auto: torch on CUDA where it has the model's network, else onnxruntime
(``bgbias.saliency.sessions.chosen_backend``)."""
PIXELS = Rule(int, minimum=1, optional=True, example=224)
"""A side in pixels that has a default."""
INTERPOLATION = Rule(str, choices=("bilinear", "bicubic"), example="bicubic")
"""How an image is resized for evaluation (``bgbias.data.geometry``); bilinear, the first, is the default."""
TEXT = Rule(str, example="name")
OPTIONAL_TEXT = Rule(str, optional=True, example="name")


def shown(name: str, value: Any) -> str:
    """An argument as its user writes it: ``--name value`` for an option ``--name``, else ``name=value``."""
    return f"{name} {value!r}" if name.startswith("-") else f"{name}={value!r}"


def check_argument(name: str, value: Any, rule: Rule) -> None:
    """Refuse ``value`` where it breaks ``rule``: an ``OptionError`` naming the argument ``name`` as its
    caller writes it (an option ``--name``, or a Python argument), with the fix in the same words."""
    if value is None and rule.optional:
        return
    kinds = {int: numbers.Integral, float: numbers.Real, bool: bool, str: str, Path: str | os.PathLike}
    right_kind = isinstance(value, kinds[rule.kind]) and (rule.kind is bool or not isinstance(value, bool))
    if right_kind and rule.kind is float:
        right_kind = math.isfinite(value)
    in_range = right_kind and (not rule.choices or value in rule.choices) and (
        rule.minimum is None or value >= rule.minimum) and (rule.maximum is None or value <= rule.maximum)
    if not in_range:
        example = rule.example if rule.example is not None else (rule.choices or (rule.minimum,))[0]
        raise OptionError(f"{shown(name, value)} is invalid: it must be {rule.expected()}",
                          fix=f"pass {shown(name, example)}")


def check_arguments(values: Mapping[str, Any], rules: Mapping[str, Rule],
                    names: Mapping[str, str] | None = None) -> None:
    """:func:`check_argument` for each of ``values`` that ``rules`` declares, named as ``names`` says
    (default: the argument's own name, as in Python)."""
    for key, rule in rules.items():
        if key in values:
            check_argument((names or {}).get(key, key), values[key], rule)
