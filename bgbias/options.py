"""Typed settings: a value from JSON, the command line or a Python call checked against what it must be.

Configuration files and a method's loss options (and an attribution's options) share :func:`coerce_value`.
The arguments the commands and the Python API share (a split, a number of repeats, a seed, a path) are each
declared once as a :class:`Rule`: the command line builds its option types from it (``bgbias.cli``), and the
API checks what it is given with :func:`check_arguments`, which names each argument as its caller writes it
(``repeats=5`` in Python, ``--repeats 5`` on the command line). These rules live below every layer that reads
settings.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bgbias.errors import OptionError


def coerce_value(value: Any, kind: Any, key: str) -> Any:
    """``value`` checked against a type annotation (int, float, bool, str, optional, tuple, dict) and in the
    form it takes (ints given for floats become floats, lists tuples); an OptionError names ``key``."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        options = [arg for arg in typing.get_args(kind) if arg is not type(None)]
        if value is None:
            return None
        for option in options[:-1]:  # the first type that takes the value; the last one's error otherwise
            with contextlib.suppress(OptionError):
                return coerce_value(value, option, key)
        return coerce_value(value, options[-1], key)
    if origin is tuple:
        if not isinstance(value, list | tuple) or len(value) != len(typing.get_args(kind)):
            raise bad_value(key, value, f"a list of {len(typing.get_args(kind))} numbers")
        return tuple(coerce_value(v, t, key) for v, t in zip(value, typing.get_args(kind), strict=True))
    if origin is dict:
        if not isinstance(value, dict):
            raise bad_value(key, value, "a section of key=value settings")
        return dict(value)
    if kind is bool:
        if not isinstance(value, bool):
            raise bad_value(key, value, "true or false")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad_value(key, value, "an integer")
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise bad_value(key, value, "a finite number")
        return float(value)
    if kind is str:
        if not isinstance(value, str):
            raise bad_value(key, value, "a string")
        return value
    raise TypeError(f"unsupported configuration type {kind!r} for {key}")


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
SPLIT = Rule(str, choices=("test", "val"), example="test")
"""The evaluated split: the paper's test split, or the validation split."""
PROTOCOL = Rule(str, choices=("fixed", "cv4"), example="fixed")
"""The paper's fixed split, or 4-fold class-disjoint cross-validation."""
FOLD = Rule(int, minimum=0, maximum=3, example=0)
REPEATS = Rule(int, minimum=1, example=5)
"""Corrupted repeats: at least one (no corrupted sets at all is ``corrupted=False`` / leaving out
``--corrupted``)."""
SEED = Rule(int, minimum=0, example=0)
WORST_K = Rule(int, minimum=1, example=10)
BATCH_SIZE = Rule(int, minimum=1, example=64)
WORKERS = Rule(int, minimum=0, example=2)
DEVICE = Rule(str, example="cpu")
"""A torch device: auto, cpu, cuda or cuda:N (checked when it is resolved)."""
MASK_DEVICE = Rule(str, choices=("auto", "cpu", "cuda"), example="cpu")
"""Where onnxruntime computes masks."""
PIXELS = Rule(int, minimum=1, optional=True, example=224)
"""A side in pixels that has a default."""
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
