"""Resumable JSON-lines ledgers for every stage long enough to be killed half-way (masks, rendered sets,
attribution scores): an optional header (format, settings), then one line per finished item, appended and
flushed. A torn last line is skipped and its item done again; at the end the file is rewritten atomically
in item order, so a resumed run ends with the same bytes as an uninterrupted one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any, BinaryIO, Generic, TypeVar

from bgbias.errors import OptionError
from bgbias.fileio import json_bytes, make_dirs, reporting_write_errors, write_bytes_atomic
from bgbias.schema import check_format

R = TypeVar("R")


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, non-ASCII kept: equal content, equal bytes (the default line spelling)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def differing_keys(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The keys whose values differ between two settings mappings, sorted, for a refusal that says which."""
    return sorted(key for key in {*old, *new} if old.get(key) != new.get(key))


@dataclass(frozen=True)
class Ledger(Generic[R]):
    """The ledger file format of one kind of record ``R``.

    ``from_json`` may return ``None`` or raise ``ValueError``/``KeyError``/``TypeError`` for a line that does
    not hold a record; such a line is skipped like a torn one, so a malformed line is never trusted.
    ``file_format`` is the format a ledger with a header states in it (:func:`~bgbias.schema.format_header`).
    """

    to_json: Callable[[R], Any]
    from_json: Callable[[Any], R | None]
    key: Callable[[R], str] = field(default=attrgetter("id"))
    """Records are kept by this key; a later line wins, so an item done again replaces its older line."""
    file_format: str | None = None

    def line(self, value: Any) -> bytes:
        """A JSON value (a header or a record's JSON) as one line (:func:`canonical_json`); a str with lone
        surrogates (a file name that is not UTF-8) is written as its JSON escape, so the file stays UTF-8 and
        reads back the same."""
        return json_bytes(canonical_json(value) + "\n")

    def parse(self, text: str) -> R | None:
        """The record a line holds, or ``None`` for a torn or malformed line."""
        try:
            return self.from_json(json.loads(text))
        except (ValueError, KeyError, TypeError):
            return None

    def read(self, path: Path) -> tuple[Any, dict[str, R]] | None:
        """``(header, records by key)`` of a ledger with a header line; ``None`` when the file is missing or
        its first line is not JSON (a kill before the header was whole)."""
        lines = _lines(path)
        if lines is None:
            return None
        try:
            header = json.loads(lines[0])
        except ValueError:
            return None
        return header, self._records(lines[1:])

    def read_records(self, path: Path) -> dict[str, R]:
        """The records by key of a ledger without a header line (every line a record); ``{}`` when missing."""
        return self._records(_lines(path) or [])

    def write(self, path: Path, records: Iterable[R], header: Any = None) -> None:
        """Rewrite the whole file atomically: ``header`` (unless ``None``, which writes no header line), then
        ``records`` in the given order. The caller's order is the canonical form, so equal records give equal
        bytes however often the run was resumed."""
        lines = [] if header is None else [self.line(header)]
        lines.extend(self.line(self.to_json(record)) for record in records)
        write_bytes_atomic(path, b"".join(lines))

    def log(self, path: Path) -> LedgerLog[R]:
        """An appending writer of this ledger (see :class:`LedgerLog`)."""
        return LedgerLog(path, self)

    def claim(
        self,
        path: Path,
        header: Any,
        *,
        force: bool,
        other: Callable[[Any], str],
        foreign: str,
        fix: str,
        foreign_fix: str | None = None,
    ) -> dict[str, R]:
        """The records already in the ledger at ``path`` for ``header`` (by key), ready to be appended to.

        A run resumes only into results it would itself have produced: a ledger whose header does not state
        :attr:`file_format` is a ``RecordError``, one whose header is spelled differently an ``OptionError``
        saying ``other(old header)``, and a non-empty folder without a ledger one saying ``foreign`` (with
        ``foreign_fix``, else ``fix``); both concern the ``force`` argument, which skips these checks.
        Unless the records are kept, a fresh ledger holding only the header is written before any work, so
        every result the folder gets later belongs to it. Headers are compared as written (``1`` and
        ``true`` differ, as they do in the file).
        """
        path = Path(path)
        if not force:
            previous = self.read(path)
            if previous is not None:
                old_header, records = previous
                if self.file_format is not None:
                    check_format(old_header, self.file_format, path=path, what="the ledger", fix=fix,
                                 parameter="force")
                if self.line(old_header) == self.line(header):
                    return records
                raise OptionError(other(old_header), path=path, fix=fix, parameter="force")
            if path.parent.is_dir() and any(path.parent.iterdir()):
                raise OptionError(foreign, path=path.parent, fix=foreign_fix or fix, parameter="force")
        self.write(path, [], header=header)
        return {}

    def _records(self, lines: Iterable[str]) -> dict[str, R]:
        records: dict[str, R] = {}
        for text in lines:
            record = self.parse(text)
            if record is not None:
                records[self.key(record)] = record
        return records


class LedgerLog(Generic[R]):
    """Appends records to a ledger, flushing each line as it is written so a kill loses at most that line;
    closing syncs the file to disk. Use as a context manager, or call ``close`` (one thread only).

    A torn last line that an earlier run left is ended first, so the first new record starts a line of its
    own instead of being glued to the torn one and lost with it.
    """

    def __init__(self, path: Path, ledger: Ledger[R]):
        self._ledger = ledger
        self._path = Path(path)
        make_dirs(self._path.parent)
        with reporting_write_errors(self._path):
            torn = _ends_torn(self._path)
            self._handle: BinaryIO = open(self._path, "ab")  # noqa: SIM115 (closed by close())
            if torn:
                self._handle.write(b"\n")

    def append(self, record: R) -> None:
        with reporting_write_errors(self._path):
            self._handle.write(self._ledger.line(self._ledger.to_json(record)))
            self._handle.flush()

    def close(self) -> None:
        with reporting_write_errors(self._path):
            try:
                self._handle.flush()
                os.fsync(self._handle.fileno())
            finally:
                self._handle.close()

    def __enter__(self) -> LedgerLog[R]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _lines(path: Path) -> list[str] | None:
    """The lines of a ledger, split at newlines only (a JSON line may hold other line separators, e.g.
    U+2028 in a file name, which ``str.splitlines`` would cut at); ``None`` when the file is missing."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    return text.split("\n")


def _ends_torn(path: Path) -> bool:
    """Whether the file at ``path`` is non-empty and does not end with a newline."""
    try:
        with open(path, "rb") as handle:
            if handle.seek(0, os.SEEK_END) == 0:
                return False
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) != b"\n"
    except FileNotFoundError:
        return False
