"""How sure each number of an evaluation report is (issue 50): the intervals of the headline, of the classes
the report shows as hurt most and of the profile's rows, as report.json keeps them, made from the per-query
scores the evaluation already has with :mod:`bgbias.measurement.intervals` at its defaults (seeded, so the
same scores give the same numbers as its functions give on ``per_query.csv``).

They are over the queries and the background draws only; training seeds are another, named source of spread
(``bgbias.report.seeds``). The profile keeps its mean ± std over draws beside them: that std is the spread
over background draws alone. Every set's metrics are resampled in one call, so sets of as many draws share
the resamples of the queries, most of the cost on a large test set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bgbias.measurement.intervals import (
    IntervalSettings,
    paired_difference,
    paired_differences,
    per_query,
    query_intervals,
)
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
    sets = {"clean": [clean], **({"corrupted": corrupted} if corrupted else {})}
    found = _intervals({name: _per_metric(scores) for name, scores in sets.items()})
    drop = None
    if corrupted:
        drop = paired_differences({name: (per_query(corrupted, name), per_query([clean], name))
                                   for name in METRICS})
    return {"clean": found["clean"], "corrupted": found.get("corrupted"),
            "drop": None if drop is None else {name: _dumped(found) for name, found in drop.items()}}


def profile_intervals(
    query_side: Sequence[RetrievalScores], worst: Mapping[str, np.ndarray],
    variants: Mapping[str, Sequence[RetrievalScores]],
) -> dict[str, Intervals]:
    """The intervals of the profile's own sets per metric by row name: ``query-side`` and each variant's over
    the queries and its draws, ``worst-case`` over the queries alone (each query's lowest score over the
    backgrounds is one value, so there are no draws to resample)."""
    return _intervals({"query-side": _per_metric(query_side), "worst-case": dict(worst),
                       **{name: _per_metric(scores) for name, scores in variants.items()}})


def gap_intervals(
    same: Sequence[RetrievalScores], other: Sequence[RetrievalScores]
) -> tuple[Intervals, dict[str, float | None]]:
    """The BG-gap (``same`` − ``other``) per metric as a paired difference, its interval and its p-value of
    no gap: the queries paired, and the draws by draw where both sets have as many (draw r of each is the same
    seed's backgrounds)."""
    found = paired_differences({name: (per_query(other, name), per_query(same, name)) for name in METRICS})
    return ({name: None if gap is None else gap.difference.model_dump() for name, gap in found.items()},
            {name: None if gap is None else gap.p_value for name, gap in found.items()})


def class_drop_intervals(
    rows: Sequence[Mapping[str, Any]], clean: RetrievalScores, corrupted: Sequence[RetrievalScores],
    labels: np.ndarray,
) -> list[dict[str, Any] | None]:
    """The MAP@R drop's interval of each class row in ``rows`` over its queries, clean against the repeats
    and paired by query. Only for the rows given: a class costs about a millisecond, so the report gives it to
    the classes it shows as hurt most, not to the 11,316 of SOP."""
    clean_map, corrupted_map = per_query([clean], "map_at_r"), per_query(corrupted, "map_at_r")
    intervals = []
    for row in rows:
        members = np.flatnonzero(labels == row["label"])
        found = paired_difference(corrupted_map[:, members], clean_map[:, members])
        intervals.append(None if found is None else found.difference.model_dump())
    return intervals


def _per_metric(scores: Sequence[RetrievalScores]) -> dict[str, np.ndarray]:
    return {metric: per_query(scores, metric) for metric in METRICS}


def _intervals(sets: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, Intervals]:
    """Per set and metric the interval of its (draws, queries) scores, all resampled in one call."""
    found = query_intervals({(name, metric): scores for name, by_metric in sets.items()
                             for metric in METRICS for scores in [by_metric[metric]]})
    return {name: {metric: _dumped(found[name, metric]) for metric in METRICS} for name in sets}


def _dumped(found: Any) -> dict[str, Any] | None:
    return None if found is None else found.model_dump()
