"""How sure each number of an evaluation report is (issue 50): the intervals of the headline, of the classes
the report shows as hurt most and of the profile's rows, as report.json keeps them, made from the per-query
scores the evaluation already has with :mod:`bgbias.measurement.intervals` at its defaults (seeded, so the
same scores give the same numbers).

They are over the queries and the background draws only; training seeds are another, named source of spread
(``bgbias.report.seeds``). The profile keeps its mean ± std over draws beside them: that std is the spread
over background draws alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bgbias.measurement.intervals import IntervalSettings, paired_difference, per_query, query_interval
from bgbias.retrieval.metrics import METRICS, RetrievalScores

Intervals = dict[str, dict[str, Any] | None]
"""An interval (as its report.json mapping, None where nothing is scored) per metric."""


def settings() -> dict[str, Any]:
    """How the report's intervals were made, stated once in it (``intervals``)."""
    return IntervalSettings().model_dump()


def headline_confidence(clean: RetrievalScores, corrupted: Sequence[RetrievalScores]) -> dict[str, Any]:
    """The headline's intervals per metric: ``clean`` over the queries, ``corrupted`` over the queries and
    the repeats, and ``drop`` = clean − corrupted, paired by query (the clean side's one draw against the
    repeats, each resampled on its own); the last two None without corrupted sets."""
    confidence: dict[str, Any] = {"clean": set_intervals([clean]), "corrupted": None, "drop": None}
    if corrupted:
        confidence["corrupted"] = set_intervals(corrupted)
        confidence["drop"] = {name: _dumped(paired_difference(per_query(corrupted, name),
                                                              per_query([clean], name)))
                              for name in METRICS}
    return confidence


def set_intervals(scores: Sequence[RetrievalScores]) -> Intervals:
    """Each metric's interval over the queries and the draws ``scores`` of one set."""
    return {name: _dumped(query_interval(per_query(scores, name))) for name in METRICS}


def worst_intervals(worst: Mapping[str, np.ndarray]) -> Intervals:
    """The worst case's intervals over the queries: each query's lowest score over the backgrounds is one
    value, so its draws are not resampled."""
    return {name: _dumped(query_interval(worst[name])) for name in METRICS}


def gap_intervals(
    same: Sequence[RetrievalScores], other: Sequence[RetrievalScores]
) -> tuple[Intervals, dict[str, float | None]]:
    """The BG-gap (``same`` − ``other``) per metric as a paired difference, its interval and its p-value of
    no gap: the queries paired, and the draws by draw where both sets have as many (draw r of each is the same
    seed's backgrounds)."""
    found = {name: paired_difference(per_query(other, name), per_query(same, name)) for name in METRICS}
    return ({name: None if gap is None else gap.difference.model_dump() for name, gap in found.items()},
            {name: None if gap is None else gap.p_value for name, gap in found.items()})


def class_drop_intervals(
    rows: Sequence[Mapping[str, Any]], clean: RetrievalScores, corrupted: Sequence[RetrievalScores],
    labels: np.ndarray,
) -> list[dict[str, Any] | None]:
    """The MAP@R drop's interval of each class row in ``rows`` over its queries, clean against the repeats
    and paired by query. Only for the rows given: one class costs about a millisecond, so the report gives it
    to the classes it shows as hurt most, not to the 11,316 of SOP."""
    clean_map, corrupted_map = per_query([clean], "map_at_r"), per_query(corrupted, "map_at_r")
    intervals = []
    for row in rows:
        members = np.flatnonzero(labels == row["label"])
        found = paired_difference(corrupted_map[:, members], clean_map[:, members])
        intervals.append(None if found is None else found.difference.model_dump())
    return intervals


def _dumped(found: Any) -> dict[str, Any] | None:
    return None if found is None else found.model_dump()
