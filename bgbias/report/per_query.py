"""An evaluation folder's ``per_query.csv`` read back as arrays (the per-query scores a comparison of two
evaluations resamples, :mod:`bgbias.report.paired`): ids, labels, and per metric the clean scores (N,) and the
corrupted repeats' (R, N), and those of the profile's variant sets where the evaluation scored them (each
(draws, N)).

The file may come from someone else, so it is validated, never trusted: the header bgbias writes
(:func:`~bgbias.measurement.summary.per_query_table`), as many cells in every row, each score a number in
[0, 1] or empty (a query alone in its class), each id once. It is read row by row: SOP's 60,502 queries are a
few MB.
"""

from __future__ import annotations

import csv
import math
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bgbias.errors import RecordError
from bgbias.measurement.variant_columns import VARIANT_COLUMN, variant_column, variant_columns, variant_order
from bgbias.retrieval.metrics import METRICS

PER_QUERY_FILE = "per_query.csv"
LEADING = ("id", "label", "r")
OPTIONAL = "empty_mask"
_REPEAT = re.compile(r"repeat(\d+)_(.+)")
FIX = "evaluate the model again (`bgbias eval --corrupted`): per_query.csv is written with its report"


@dataclass(frozen=True)
class PerQueryScores:
    """One evaluation's per-query scores, queries in the file's order; NaN where a query was not scored (alone
    in its class)."""

    path: Path
    ids: tuple[str, ...]
    labels: tuple[str, ...]
    clean: dict[str, np.ndarray]
    """metric → (queries,)"""
    corrupted: dict[str, np.ndarray]
    """metric → (repeats, queries); (0, queries) for an evaluation without corrupted sets."""
    variants: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    """The profile's variant sets: name → metric → (draws, queries); empty for an evaluation without them."""

    @property
    def repeats(self) -> int:
        return len(next(iter(self.corrupted.values())))


def read_per_query(path: str | os.PathLike[str]) -> PerQueryScores:
    """The scores of ``per_query.csv`` (``path``: the file or its evaluation folder); a file of another shape
    than bgbias writes is a ``RecordError`` naming it, the row and the column."""
    path = Path(path)
    if path.is_dir():
        path = path / PER_QUERY_FILE
    if not path.is_file():
        raise RecordError("the evaluation has no per-query scores", path=path, fix=FIX)
    with path.open(newline="", encoding="utf-8") as handle:
        rows = csv.reader(handle)
        header = next(rows, None)
        if header is None:
            raise RecordError("the per-query file is empty", path=path, fix=FIX)
        columns, repeats, draws = _score_columns(header, path)
        first = len(header) - len(columns)
        ids: list[str] = []
        labels: list[str] = []
        values: list[list[float]] = []
        for number, row in enumerate(rows, 2):
            if len(row) != len(header):
                raise RecordError(f"line {number} of the per-query file has {len(row)} cells, its header "
                                  f"{len(header)}", path=path, fix=FIX)
            ids.append(row[0])
            labels.append(row[1])
            values.append([_score(cell, number, column, path) for cell, column in zip(row[first:], columns,
                                                                                       strict=True)])
    if not ids:
        raise RecordError("the per-query file has no query", path=path, fix=FIX)
    if len(set(ids)) != len(ids):
        twice = next(query for query, count in Counter(ids).items() if count > 1)
        raise RecordError(f"the per-query file lists the query {twice!r} twice", path=path, fix=FIX)
    table = np.asarray(values, dtype=np.float64).T  # (columns, queries)
    index = {column: row for row, column in enumerate(columns)}
    clean = {metric: table[index[f"clean_{metric}"]] for metric in METRICS}
    corrupted = {metric: table[np.array([index[f"repeat{r}_{metric}"] for r in range(repeats)], dtype=int)]
                 for metric in METRICS}
    variants = {name: {metric: table[np.array([index[variant_column(name, draw, metric)]
                                               for draw in range(count)], dtype=int)] for metric in METRICS}
                for name, count in draws.items()}
    return PerQueryScores(path, tuple(ids), tuple(labels), clean, corrupted, variants)


def _score_columns(header: list[str], path: Path) -> tuple[list[str], int, dict[str, int]]:
    """The score columns of a header bgbias writes, its number of repeats and of draws of each variant set
    (in the file's order); any other header is an error that names what it lacks or has too much."""
    leading = list(LEADING) + ([OPTIONAL] if len(header) > 3 and header[3] == OPTIONAL else [])
    if header[:len(leading)] != leading:
        raise RecordError(f"the per-query file's header starts {header[:3]}, not {list(LEADING)}", path=path,
                          fix=FIX)
    columns = header[len(leading):]
    repeat_ids = sorted({int(match[1]) for column in columns if (match := _REPEAT.fullmatch(column))})
    repeats = len(repeat_ids)
    draws = _variant_draws(columns, path)
    expected = [f"{prefix}_{metric}" for prefix in ("clean", *(f"repeat{r}" for r in range(repeats)))
                for metric in METRICS] + variant_columns(draws)
    if columns != expected:
        missing = [column for column in expected if column not in columns]
        extra = [column for column in columns if column not in expected]
        said = "; ".join(part for part in (missing and f"lacks the column {missing[0]}",
                                           extra and f"has the column {extra[0]} bgbias does not write")
                         if part) or "has its columns in another order"
        raise RecordError(f"the per-query file's header {said}", path=path, fix=FIX)
    return columns, repeats, {name: draws[name] for name in variant_order(draws)}


def _variant_draws(columns: list[str], path: Path) -> dict[str, int]:
    """How many draws each variant set named in ``columns`` has: numbered 0 … k−1, or an error naming the
    gap (a missing metric or an unknown name is left to the header's check, which names the column)."""
    numbers: dict[str, set[int]] = {}
    for column in columns:
        if match := VARIANT_COLUMN.fullmatch(column):
            numbers.setdefault(match[1], set()).add(int(match[2]))
    for name, found in numbers.items():
        if found != set(range(len(found))):
            numbers_given = ", ".join(map(str, sorted(found)))
            raise RecordError(f"the per-query file numbers the draws of {name} {numbers_given}, not 0 to "
                              f"{len(found) - 1}", path=path, fix=FIX)
    return {name: len(found) for name, found in numbers.items()}


def _score(cell: str, line: int, column: str, path: Path) -> float:
    """A score cell: a number in [0, 1], or NaN for an empty cell (the query was not scored)."""
    if cell == "":
        return math.nan
    try:
        value = float(cell)
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 1.0:  # NaN fails too
        raise RecordError(f"line {line} of the per-query file holds {cell[:40]!r} in {column}, not a score "
                          "in [0, 1] or an empty cell", path=path, fix=FIX)
    return value
