"""Typed settings: a value from JSON or the command line checked against the type it must have.

Configuration files and a method's loss options (and an attribution's options) share these rules, so they
live below every layer that reads settings.
"""

from __future__ import annotations

import contextlib
import math
import types
import typing
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
