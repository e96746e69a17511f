"""The generic JSON-lines ledger: torn lines skipped, appends resumed, rewrites atomic and in the caller's
order, and an output folder claimed only by results of the same settings."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from bgbias.errors import OptionError
from bgbias.ledger import Ledger, canonical_json, differing_keys


@dataclass(frozen=True)
class Item:
    id: str
    value: int

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "value": self.value}

    @classmethod
    def from_json(cls, data: Any) -> Item | None:
        if not isinstance(data, dict) or not isinstance(data.get("value"), int):
            return None
        return cls(str(data["id"]), data["value"])


LEDGER = Ledger(Item.to_json, Item.from_json)
HEADER = {"settings": {"seed": 0}}
A, B, C = Item("a", 1), Item("b", 2), Item("c", 3)


def refusing(ledger, path, header, force=False):
    return ledger.claim(path, header, force=force, other=lambda old: f"other settings {old!r}",
                        foreign="not a ledger folder", fix="pass --force")


def test_a_torn_last_line_and_malformed_lines_are_skipped(tmp_path):
    path = tmp_path / "l.jsonl"
    LEDGER.write(path, [A, B], header=HEADER)
    with path.open("a", encoding="utf-8") as handle:
        handle.write('{"id": "x", "value": 9}\n{"id": "y", "value": "not an int"}\n[1, 2]\n{"id": "c", "val')
    header, records = LEDGER.read(path)
    assert header == HEADER
    assert records == {"a": A, "b": B, "x": Item("x", 9)}


def test_a_ledger_without_a_whole_header_is_none_and_a_missing_one_too(tmp_path):
    path = tmp_path / "l.jsonl"
    assert LEDGER.read(path) is None
    path.write_text('{"settings": {"se')
    assert LEDGER.read(path) is None
    path.write_text("")
    assert LEDGER.read(path) is None


def test_headerless_files_read_every_line_as_a_record(tmp_path):
    path = tmp_path / "r.jsonl"
    assert LEDGER.read_records(path) == {}
    LEDGER.write(path, [B, A])
    assert path.read_text().splitlines() == ['{"id":"b","value":2}', '{"id":"a","value":1}']
    with path.open("a") as handle:
        handle.write('{"id": "c", "va')
    assert LEDGER.read_records(path) == {"b": B, "a": A}


def test_appended_lines_are_flushed_at_once_and_a_later_line_wins(tmp_path):
    path = tmp_path / "sub" / "l.jsonl"
    with LEDGER.log(path) as log:
        log.append(A)
        assert path.read_bytes() == b'{"id":"a","value":1}\n'  # on disk before the log is closed
        log.append(Item("a", 5))
    assert LEDGER.read_records(path) == {"a": Item("a", 5)}


def test_a_resumed_run_ends_with_the_bytes_of_an_uninterrupted_one(tmp_path):
    whole, resumed = tmp_path / "whole.jsonl", tmp_path / "resumed.jsonl"
    for path in (whole, resumed):
        LEDGER.write(path, [], header=HEADER)
    with LEDGER.log(whole) as log:
        for item in (A, B, C):
            log.append(item)
    LEDGER.write(whole, [A, B, C], header=HEADER)

    with LEDGER.log(resumed) as log:  # killed while writing the third line
        log.append(B)
        log.append(A)
    with resumed.open("a") as handle:
        handle.write('{"id":"c","va')
    _, done = LEDGER.read(resumed)
    assert done == {"b": B, "a": A}
    with LEDGER.log(resumed) as log:  # the resumed run: its first line must not be glued to the torn one
        log.append(C)
    _, done = LEDGER.read(resumed)
    assert done == {"b": B, "a": A, "c": C}
    LEDGER.write(resumed, [done[key] for key in ("a", "b", "c")], header=HEADER)
    assert resumed.read_bytes() == whole.read_bytes()


def test_a_rewrite_is_atomic_and_in_the_callers_order(tmp_path, monkeypatch):
    path = tmp_path / "l.jsonl"
    LEDGER.write(path, [C, A, B], header=HEADER)
    first = path.read_bytes()
    lines = [json.loads(line) for line in first.decode().splitlines()]
    assert lines == [HEADER, *(record.to_json() for record in (C, A, B))]

    def failing(record):
        raise RuntimeError("killed while writing")

    broken = Ledger(failing, Item.from_json)
    with pytest.raises(RuntimeError):
        broken.write(path, [A], header=HEADER)
    assert path.read_bytes() == first  # a failed rewrite leaves the old file whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["l.jsonl"]  # and no temporary behind


def test_lines_are_canonical_json_of_any_file_name(tmp_path):
    assert LEDGER.line({"b": 1, "a": "é"}) == '{"a":"é","b":1}\n'.encode()
    assert canonical_json([1, {"b": None, "a": True}]) == '[1,{"a":true,"b":null}]'

    path = tmp_path / "r.jsonl"
    odd = [Item("caf\udce9.jpg", 1), Item("line\u2028separator.jpg", 2)]  # not UTF-8; a separator inside JSON
    with LEDGER.log(path) as log:
        for item in odd:
            log.append(item)
    assert LEDGER.read_records(path) == {item.id: item for item in odd}
    path.read_bytes().decode("utf-8")  # the file stays valid UTF-8


def test_claim_starts_a_ledger_and_resumes_one_of_the_same_header(tmp_path):
    path = tmp_path / "out" / "l.jsonl"
    assert refusing(LEDGER, path, HEADER) == {}
    assert path.read_bytes() == LEDGER.line(HEADER)
    with LEDGER.log(path) as log:
        log.append(A)
    assert refusing(LEDGER, path, {"settings": {"seed": 0}}) == {"a": A}


def test_claim_refuses_other_settings_and_other_files_unless_forced(tmp_path):
    path = tmp_path / "l.jsonl"
    refusing(LEDGER, path, HEADER)
    with LEDGER.log(path) as log:
        log.append(A)
    with pytest.raises(OptionError, match="other settings") as raised:
        refusing(LEDGER, path, {"settings": {"seed": False}})  # equal in Python, not as written
    assert raised.value.path == str(path) and raised.value.fix == "pass --force"
    assert LEDGER.read(path)[1] == {"a": A}  # a refusal changes nothing

    assert refusing(LEDGER, path, {"settings": {"seed": 1}}, force=True) == {}
    assert path.read_bytes() == LEDGER.line({"settings": {"seed": 1}})  # cleared: the header alone

    other = tmp_path / "other"
    other.mkdir()
    (other / "picture.png").write_bytes(b"")
    with pytest.raises(OptionError, match="not a ledger folder") as raised:
        refusing(LEDGER, other / "l.jsonl", HEADER)
    assert raised.value.path == str(other)
    assert refusing(LEDGER, other / "l.jsonl", HEADER, force=True) == {}


def test_differing_keys_names_what_changed():
    assert differing_keys({"a": 1, "b": 2, "c": [1]}, {"a": 1, "b": 3, "d": None, "c": [1]}) == ["b"]
    assert differing_keys({"a": 1}, {"b": 1}) == ["a", "b"]
