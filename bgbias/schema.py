"""Reading back a JSON record bgbias wrote, checked against its declared shape.

A record's shape is declared once, as a :class:`Record` (a pydantic model), and checked strictly as it is read
into a typed object: a file edited by hand or damaged is a :class:`~bgbias.errors.RecordError` naming the
file, the field, what it must be, what it holds and the fix, never a traceback far from the file or a table
that prints a wrong value. Every file states its ``format`` and ``version`` 1 (:func:`format_header`); any
other is refused. Unknown keys are kept (:class:`Record`) or refused (:class:`ClosedRecord`).
"""

from __future__ import annotations

import functools
import json
import os
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, GetJsonSchemaHandler, TypeAdapter, ValidationError
from pydantic.json_schema import JsonSchemaValue

from bgbias.errors import RecordError

_SHOWN = 60
"""How many characters of a wrong value an error shows."""


class Record(BaseModel):
    """A JSON record bgbias writes and reads back: strict JSON types, finite numbers, read-only, and any field
    beyond the declaration kept (``model_extra``)."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True, allow_inf_nan=False)


class ClosedRecord(Record):
    """A record whose every key bgbias defines: a key it does not declare is an error."""

    model_config = ConfigDict(extra="forbid")


FORMAT_VERSION = 1
"""The version of every file format bgbias writes (a format that changes gets a new identifier instead)."""


def format_header(file_format: str) -> dict[str, Any]:
    """The ``format`` and ``version`` keys a file of ``file_format`` states."""
    return {"format": file_format, "version": FORMAT_VERSION}


def check_format(value: Any, file_format: str, *, path: str | os.PathLike[str] | None, what: str,
                 fix: str, parameter: str | None = None) -> None:
    """Refuse ``value`` (a file's JSON object, or a header inside it) unless it states ``file_format`` at
    version 1 (:func:`format_header`): a ``RecordError`` naming the file, and ``fix``, the command that makes
    it again (``parameter``: the argument ``fix`` names, as :class:`~bgbias.errors.BgbiasError` has it)."""
    stated = value if isinstance(value, dict) else {}
    version = stated.get("version")
    if stated.get("format") != file_format or type(version) is not int or version != FORMAT_VERSION:
        found = f"format {shown(stated.get('format'))}, version {shown(version)}"
        raise RecordError(f"{what} was written by a pre-release bgbias (or another tool): it states {found}, "
                          f"not format {json.dumps(file_format)}, version {FORMAT_VERSION}",
                          path=path, fix=fix, parameter=parameter)


def read_record(path: str | os.PathLike[str], shape: Any, *, what: str, fix: str,
                file_format: str | None = None) -> Any:
    """The JSON file at ``path``, checked against ``shape`` (a :class:`Record` becomes its typed object),
    and to state ``file_format`` where one is given (:func:`check_format`); ``what`` names the file in errors
    ("the evaluation report"), ``fix`` says how to make it again. A missing, unreadable or malformed file, or
    a key given twice in one object, is a ``RecordError`` too."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecordError(f"{what} is missing", path=path, fix=fix) from None
    except (OSError, UnicodeDecodeError) as error:
        raise RecordError(f"{what} cannot be read ({error})", path=path, fix=fix) from None
    return parse_record(text, path, shape, what=what, fix=fix, file_format=file_format)


def parse_record(text: str, path: str | os.PathLike[str], shape: Any, *, what: str, fix: str,
                 file_format: str | None = None) -> Any:
    """The JSON ``text`` (of the file ``path``) checked as :func:`read_record` does."""
    try:
        value = json.loads(text, object_pairs_hook=unique_keys)
    except ValueError as error:
        raise RecordError(f"{what} is not valid JSON ({error})", path=path, fix=fix) from None
    if file_format is not None:
        check_format(value, file_format, path=path, what=what, fix=fix)
    return check_record(value, shape, path=path, what=what, fix=fix)


def check_record(value: Any, shape: Any, *, path: str | os.PathLike[str] | None, what: str, fix: str) -> Any:
    """``value`` as ``shape`` (records as their typed objects) when it has that shape, else a
    ``RecordError`` naming the first wrong field."""
    try:
        return _adapter(shape).validate_python(value, strict=True)
    except ValidationError as error:
        problem = explain_problem(error, shape)
    field = f"field {problem.field}" if problem.field else "the file"
    raise RecordError(f"{what}: {field} must be {problem.wanted}, got {problem.found}", path=path, fix=fix)


def field_problem(value: Any, shape: Any) -> tuple[str, str, str] | None:
    """``(field, what it must be, what it holds)`` of the first field of ``value`` that does not have
    ``shape``, or ``None`` when every field does."""
    try:
        _adapter(shape).validate_python(value, strict=True)
    except ValidationError as error:
        return explain_problem(error, shape)[:3]
    return None


@dataclass(frozen=True)
class Must:
    """Field metadata: what a value must be beyond its type, in the words its errors use (and its JSON
    Schema's description, which editors show)."""

    words: str

    def __get_pydantic_json_schema__(self, core_schema: Any,
                                     handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {**handler(core_schema), "description": f"must be {self.words}"}


class Problem(NamedTuple):
    """The first problem of a validation error in bgbias's words: the dotted ``field``, what it must be,
    what it holds (JSON, shortened), and the fields of the record it is in (for an unknown key)."""

    field: str
    wanted: str
    found: str
    known: tuple[str, ...]


def explain_problem(error: ValidationError, shape: Any) -> Problem:
    """The first problem of ``error``, raised validating a value as ``shape`` (records, settings, their
    lists, dicts and unions), found by walking its location down the declared types.

    A value of the right type outside its field's limits is worded by the field's :class:`Must` where it has
    one. Where the field is a union (``int | str``), its members each report a problem; when the value is a
    container one member declares (an object for a record), the problem inside it is the news, else the
    union is."""
    problems = error.errors(include_url=False)
    first = problems[0]
    loc = first["loc"]
    if first["type"] == "missing" and loc and isinstance(loc[-1], int):
        # A fixed-length list that is too short: its length is the news, not the element it lacks.
        loc, first = loc[:-1], {**first, "type": "length"}
    declared, where, depth, known = _declared(shape, loc)
    if depth < len(loc):  # the walk stopped at a union: look for a problem inside one of its members
        union, at = first["loc"][:depth], depth + 1
        inside = [p for p in problems if p["loc"][:depth] == union and len(p["loc"]) > at]
        if inside:
            first = max(inside, key=lambda p: len(p["loc"]))
            member = _member(_strip(declared), first["loc"][depth])
            declared, inner, _, known = _declared(member, first["loc"][at:])
            where = _join(where, inner)
        else:
            first = {**first, "type": "union", "input": _value_at(problems, depth)}
    found = "nothing (the field is missing)" if first["type"] == "missing" else shown(first["input"])
    words = next((note.words for note in _metadata(declared) if isinstance(note, Must)), None)
    limit = _LIMITS.get(first["type"])
    if words is None or first["type"] not in _OUT_OF_LIMITS:
        words = limit.format(**first.get("ctx", {})) if limit else describe_type(declared)
    return Problem(where, words, found, known)


UNKNOWN_KEY = "absent (the key is unknown)"
"""What a key the record does not declare must be: an explained problem's ``wanted``."""

_LIMITS = {"greater_than": "greater than {gt}", "greater_than_equal": "at least {ge}",
           "less_than": "less than {lt}", "less_than_equal": "at most {le}",
           "too_short": "at least {min_length} long", "too_long": "at most {max_length} long",
           "extra_forbidden": UNKNOWN_KEY, "value_error": "{error}"}
"""Words for the errors of a field's limits (its type is right, its value out of range); a validator's
``ValueError`` says itself what the value must be."""

_OUT_OF_LIMITS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "literal_error",
                  "string_pattern_mismatch", "string_too_short", "value_error", "union"}
"""The errors a field's :class:`Must` words, where it has them, tell better than their own words."""


def _declared(shape: Any, loc: tuple[int | str, ...]) -> tuple[Any, str, int, tuple[str, ...]]:
    """The type declared at ``loc`` inside ``shape`` (with its field's metadata), that field's dotted name,
    how many parts of ``loc`` the walk used (it stops at a union, whose members pydantic names in ``loc``),
    and the fields of the record the walk ended in."""
    where, known = "", ()
    for depth, part in enumerate(loc):
        if _is_union(_strip(shape)):
            return shape, where, depth, known
        shape = _strip(shape)
        origin = typing.get_origin(shape)
        if _is_record(shape):
            known = tuple(shape.model_fields)
            field = shape.model_fields.get(str(part))
            shape = Any if field is None else (
                Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation)
            where = _join(where, part)
        elif origin in (list, tuple):
            shape = typing.get_args(shape)[int(part) if origin is tuple else 0]
            where = f"{where}[{part}]"
        elif origin is dict:
            shape = typing.get_args(shape)[1]
            where = _join(where, part)
        else:  # a key pydantic names beyond the declaration (an extra key of a closed record)
            shape, where = Any, _join(where, part)
    return shape, where, len(loc), known


def _metadata(declared: Any) -> tuple[Any, ...]:
    return typing.get_args(declared)[1:] if typing.get_origin(declared) is Annotated else ()


def _is_record(shape: Any) -> bool:
    return isinstance(shape, type) and issubclass(shape, BaseModel)


def _strip(shape: Any) -> Any:
    """``X | None`` and ``Annotated[X, …]`` as ``X`` for walking into it (pydantic reports no union there)."""
    if typing.get_origin(shape) is typing.Annotated:
        return _strip(typing.get_args(shape)[0])
    if typing.get_origin(shape) in (typing.Union, types.UnionType):
        options = [arg for arg in typing.get_args(shape) if arg is not type(None)]
        if len(options) == 1:
            return _strip(options[0])
    return shape


def _is_union(shape: Any) -> bool:
    return typing.get_origin(shape) in (typing.Union, types.UnionType)


def _member(union: Any, tag: int | str) -> Any:
    """The member of ``union`` that pydantic's ``tag`` in an error's location names (a record by its class
    name, a list or dict by its type)."""
    for option in typing.get_args(union):
        name = getattr(option, "__name__", "")
        origin = typing.get_origin(option)
        if tag == name or (origin is not None and str(tag).startswith(origin.__name__)):
            return option
    return Any


def _value_at(problems: list[Any], depth: int) -> Any:
    """The value at the union a walk stopped at: the input of the member problem that sits right at it."""
    return next((p["input"] for p in problems if len(p["loc"]) == depth + 1), problems[0]["input"])


@functools.cache
def _adapter(shape: Any) -> TypeAdapter[Any]:
    return TypeAdapter(shape)


def describe_type(kind: Any) -> str:
    """What a value of type ``kind`` is, in the words of bgbias's errors ("a finite number"); settings word
    their type errors as records do."""
    if typing.get_origin(kind) is typing.Annotated:
        return describe_type(typing.get_args(kind)[0])
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe_type(option) for option in typing.get_args(kind))
    if origin is Literal:
        values = [json.dumps(value) for value in typing.get_args(kind)]
        return values[0] if len(values) == 1 else "one of " + ", ".join(values)
    if origin is list:
        return f"a list of {_plural(describe_type(typing.get_args(kind)[0]))}"
    if origin is tuple:
        return f"a list of {len(typing.get_args(kind))} {_plural(describe_type(typing.get_args(kind)[0]))}"
    if origin is dict or _is_record(kind):
        return "an object"
    names = {None: "null", type(None): "null", bool: "true or false", int: "an integer",
             float: "a finite number", str: "a string", Any: "anything", object: "anything"}
    return names.get(kind, repr(kind))


def _plural(description: str) -> str:
    for article in ("an ", "a "):
        if description.startswith(article):
            return description[len(article):] + "s"
    return description


def _join(where: str, key: Any) -> str:
    """A field's dotted name: ``rows[1].count``."""
    key = str(key)
    return f"{where}.{key}" if where and key and not key.startswith("[") else where + key


def shown(value: Any) -> str:
    """A value as an error shows it: JSON, shortened."""
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
