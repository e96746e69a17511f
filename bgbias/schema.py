"""Reading back a JSON record bgbias wrote, checked against its declared shape.

Every stage reads the files of an earlier one (docs/design.md, *Pipeline and layers*): an evaluation's
``report.json``, a run's ``run.json``, an explanation's ``summary.json`` and ledger header, a model's
``model.json``, a study's ``failures.json``. A file edited by hand, damaged, or written by another tool
holds ``"map_at_r": "0.99"`` as easily as ``0.99``; read on trust, it ends in a traceback far from the file,
or, worse, in a table that prints it. So a record's shape is declared once, as a ``TypedDict`` (nested
records, ``list``, ``dict[str, …]``, ``X | None``, ``Literal``, ``NotRequired`` for a field older files
lack), and checked as it is read: a wrong field is a :class:`~bgbias.errors.RecordError` naming the file,
the field (``corrupted.mean.map_at_r``), what it must be, what it holds, and the fix (making the file again).
Fields a record has beyond its declaration are kept as they are (a report carries its model's description),
and nothing is coerced: ``"3"`` is not a number, ``1`` is not ``true``.

The corrupted-set manifests are read more strictly still (unknown keys refused, ranges checked), by
:mod:`bgbias.augment.manifest_fields`.
"""

from __future__ import annotations

import functools
import json
import math
import os
import types
import typing
from pathlib import Path
from typing import Any, Literal

from bgbias.errors import RecordError

_SHOWN = 60
"""How many characters of a wrong value an error shows."""


def read_record(path: str | os.PathLike[str], shape: Any, *, what: str, fix: str) -> Any:
    """The JSON file at ``path``, checked against ``shape``; ``what`` names the file in errors ("the
    evaluation report"), ``fix`` says how to make it again. A missing, unreadable or malformed file, or a key
    given twice in one object, is a ``RecordError`` too."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecordError(f"{what} is missing", path=path, fix=fix) from None
    except (OSError, UnicodeDecodeError) as error:
        raise RecordError(f"{what} cannot be read ({error})", path=path, fix=fix) from None
    return parse_record(text, path, shape, what=what, fix=fix)


def parse_record(text: str, path: str | os.PathLike[str], shape: Any, *, what: str, fix: str) -> Any:
    """The JSON ``text`` (of the file ``path``) checked against ``shape``, as :func:`read_record` does."""
    try:
        value = json.loads(text, object_pairs_hook=unique_keys)
    except ValueError as error:
        raise RecordError(f"{what} is not valid JSON ({error})", path=path, fix=fix) from None
    return check_record(value, shape, path=path, what=what, fix=fix)


def check_record(value: Any, shape: Any, *, path: str | os.PathLike[str] | None, what: str, fix: str) -> Any:
    """``value`` itself when it has ``shape``, else a ``RecordError`` naming the first wrong field."""
    problem = field_problem(value, shape)
    if problem is not None:
        where, wanted, found = problem
        field = f"field {where}" if where else "the file"
        raise RecordError(f"{what}: {field} must be {wanted}, got {found}", path=path, fix=fix)
    return value


def field_problem(value: Any, shape: Any, where: str = "") -> tuple[str, str, str] | None:
    """``(field, what it must be, what it holds)`` of the first field of ``value`` that does not have
    ``shape``, or ``None`` when every field does."""
    if shape is Any or shape is object:
        return None
    origin = typing.get_origin(shape)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(shape)
        if any(field_problem(value, option, where) is None for option in options):
            return None
        nested = [problem for option in options if _is_container(option, value)
                  for problem in [field_problem(value, option, where)] if problem is not None]
        # A container of the right kind with a wrong field inside: that field is the news, not the union.
        return nested[0] if nested else (where, " or ".join(_describe(o) for o in options), _shown(value))
    if origin is Literal:
        if any(_same(value, allowed) for allowed in typing.get_args(shape)):
            return None
        return where, _describe(shape), _shown(value)
    if origin is list:
        if not isinstance(value, list):
            return where, _describe(shape), _shown(value)
        (item,) = typing.get_args(shape)
        return next((problem for index, entry in enumerate(value)
                     for problem in [field_problem(entry, item, f"{where}[{index}]")] if problem), None)
    if origin is dict:
        if not isinstance(value, dict):
            return where, _describe(shape), _shown(value)
        _key, item = typing.get_args(shape)
        return next((problem for key, entry in value.items()
                     for problem in [field_problem(entry, item, _join(where, key))] if problem), None)
    if typing.is_typeddict(shape):
        if not isinstance(value, dict):
            return where, _describe(shape), _shown(value)
        for key, (kind, required) in _fields(shape).items():
            if key not in value:
                if required:
                    return _join(where, key), _describe(kind), "nothing (the field is missing)"
                continue
            problem = field_problem(value[key], kind, _join(where, key))
            if problem is not None:
                return problem
        return None
    if _fits(value, shape):
        return None
    return where, _describe(shape), _shown(value)


@functools.cache
def _fields(record: Any) -> dict[str, tuple[Any, bool]]:
    """A ``TypedDict``'s fields: each one's type and whether a record must have it. Read from the annotations
    rather than ``__required_keys__``, which misses ``NotRequired`` in a module with postponed annotations."""
    fields = {}
    for key, kind in typing.get_type_hints(record, include_extras=True).items():
        required = record.__total__
        while typing.get_origin(kind) in (typing.NotRequired, typing.Required):
            required = typing.get_origin(kind) is typing.Required
            (kind,) = typing.get_args(kind)
        fields[key] = (kind, required)
    return fields


def _fits(value: Any, kind: Any) -> bool:
    if kind is None or kind is type(None):
        return value is None
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if kind is str:
        return isinstance(value, str)
    raise TypeError(f"a record field cannot be declared as {kind!r}")


def _describe(kind: Any) -> str:
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(option) for option in typing.get_args(kind))
    if origin is Literal:
        values = [json.dumps(value) for value in typing.get_args(kind)]
        return values[0] if len(values) == 1 else "one of " + ", ".join(values)
    if origin is list:
        return f"a list of {_plural(_describe(typing.get_args(kind)[0]))}"
    if origin is dict or typing.is_typeddict(kind):
        return "an object"
    names = {None: "null", type(None): "null", bool: "true or false", int: "an integer",
             float: "a finite number", str: "a string", Any: "anything", object: "anything"}
    return names.get(kind, repr(kind))


def _plural(description: str) -> str:
    for article in ("an ", "a "):
        if description.startswith(article):
            return description[len(article):] + "s"
    return description


def _is_container(kind: Any, value: Any) -> bool:
    """Whether ``value`` is the list or object ``kind`` declares (so a problem inside it is about a field)."""
    origin = typing.get_origin(kind)
    if origin is list:
        return isinstance(value, list)
    return (origin is dict or typing.is_typeddict(kind)) and isinstance(value, dict)


def _same(value: Any, allowed: Any) -> bool:
    """Equal and of the same JSON type: ``1`` is not ``true``, nor ``1.0`` the version ``1``."""
    return type(value) is type(allowed) and value == allowed


def _join(where: str, key: Any) -> str:
    return f"{where}.{key}" if where else str(key)


def _shown(value: Any) -> str:
    shown = json.dumps(value, ensure_ascii=False, default=repr)
    return shown if len(shown) <= _SHOWN else shown[:_SHOWN - 3] + "..."


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s ``object_pairs_hook`` that refuses a key given twice in one object (JSON keeps the
    last silently; a file bgbias wrote never has one)."""
    found = dict(pairs)
    if len(found) != len(pairs):
        twice = sorted({key for key, _ in pairs if sum(k == key for k, _ in pairs) > 1})
        raise ValueError(f"a key is given twice in one object: {', '.join(twice)}")
    return found
