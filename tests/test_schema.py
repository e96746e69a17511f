"""Reading back records: a field of the wrong type is an error naming the file, the field, what it must be,
what it holds and the fix; nothing is coerced; fields beyond the declaration ride along."""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest

from bgbias.errors import RecordError
from bgbias.schema import ClosedRecord, Record, check_record, field_problem, read_record


class Inner(Record):
    value: float | None
    count: int


class Outer(Record):
    format: Literal["demo"]
    name: str
    flag: bool
    inner: Inner
    rows: list[Inner]
    by_key: dict[str, int]
    later: str | None = None
    anything: Any = None
    label: int | str = 0
    checkpoint: Inner | str | None = None


class Closed(ClosedRecord):
    count: int


GOOD = {"format": "demo", "name": "x", "flag": True, "inner": {"value": None, "count": 2},
        "rows": [{"value": 0.5, "count": 1}], "by_key": {"a": 1}, "extra": [1, 2]}


def test_a_record_of_its_shape_is_returned_as_it_is(tmp_path):
    path = tmp_path / "good.json"
    path.write_text(json.dumps(GOOD))
    record = read_record(path, Outer, what="the demo", fix="make it again")
    assert record.inner.count == 2 and record.rows[0].value == 0.5 and record.by_key == {"a": 1}
    assert record.model_extra == {"extra": [1, 2]}
    assert record.model_dump(exclude_unset=True) == GOOD


@pytest.mark.parametrize(("change", "field", "wanted", "found"), [
    ({"inner": {"value": "0.99", "count": 2}}, "inner.value", "a finite number or null", '"0.99"'),
    ({"rows": [{"value": 0.5, "count": 1}, {"value": 1, "count": 1.5}]}, "rows[1].count", "an integer",
     "1.5"),
    ({"flag": 1}, "flag", "true or false", "1"),
    ({"inner": {"value": 1.0, "count": True}}, "inner.count", "an integer", "true"),
    ({"format": "other"}, "format", '"demo"', '"other"'),
    ({"by_key": {"a": "1"}}, "by_key.a", "an integer", '"1"'),
    ({"rows": "oops"}, "rows", "a list of objects", '"oops"'),
    ({"later": 3}, "later", "a string or null", "3"),
    ({"inner": {"value": float("nan"), "count": 1}}, "inner.value", "a finite number or null", "NaN"),
    ({"label": 1.5}, "label", "an integer or a string", "1.5"),
    ({"checkpoint": {"value": 1, "count": "2"}}, "checkpoint.count", "an integer", '"2"'),
    ({"checkpoint": 3}, "checkpoint", "an object or a string or null", "3"),
    ({"inner": [1]}, "inner", "an object", "[1]"),
])
def test_a_wrong_field_is_named_with_what_it_must_be(change, field, wanted, found):
    with pytest.raises(RecordError) as raised:
        check_record({**GOOD, **change}, Outer, path="demo.json", what="the demo", fix="make it again")
    assert raised.value.problem == f"the demo: field {field} must be {wanted}, got {found}"
    assert raised.value.path == "demo.json" and raised.value.fix == "make it again"


def test_a_missing_field_and_a_wrong_file_are_named():
    assert field_problem({k: v for k, v in GOOD.items() if k != "name"}, Outer) == (
        "name", "a string", "nothing (the field is missing)")
    assert field_problem([GOOD], Outer) == ("", "an object", json.dumps([GOOD])[:57] + "...")
    assert field_problem({k: v for k, v in GOOD.items() if k != "later"}, Outer) is None
    assert field_problem({"count": 1, "other": 2}, Closed) == ("other", "absent (the key is unknown)", "2")


def test_unreadable_files_are_record_errors(tmp_path):
    path = tmp_path / "r.json"
    with pytest.raises(RecordError, match="is missing"):
        read_record(path, Outer, what="the demo", fix="f")
    path.write_text('{"a": 1, "a": 2}')
    with pytest.raises(RecordError, match="a key is given twice in one object: a"):
        read_record(path, dict[str, int], what="the demo", fix="f")
    path.write_bytes(b"\xff")
    with pytest.raises(RecordError, match="cannot be read"):
        read_record(path, Outer, what="the demo", fix="f")
