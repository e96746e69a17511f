"""How sure each number of an evaluation report is (issue 50): the intervals of the headline, of the classes
the report shows as hurt most and of the profile's rows, as report.json keeps them, made from the per-query
scores the evaluation already has with :mod:`bgbias.measurement.intervals` at its defaults (seeded, so the
same scores give the same numbers as its functions give on ``per_query.csv``).

They are over the queries and the background draws only; training seeds are another, named source of spread
(``bgbias.report.seeds``). The profile keeps its mean ± std over draws beside them: that std is the spread
over background draws alone. The headline's and the profile's sets are resampled in one call, so the sets of
as many draws share the resamples of the queries: on SOP's 60,502 queries those are most of the cost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bgbias.measurement.intervals import (
    IntervalSettings,
    PairedDifference,
    paired_difference,
    paired_differences,
    per_query,
    query_intervals,
)
from bgbias.retrieval.metrics import METRICS, RetrievalScores

Intervals = dict[str, dict[str, Any] | None]
"""An interval (as its report.json mapping, None where nothing is scored) per metric."""

GAP = ("mixed-same", "mixed-rand")
"""The BG-gap's two sets: the first minus the second."""


def settings() -> dict[str, Any]:
    """How the report's intervals were made, stated once in it (``intervals``)."""
    return IntervalSettings().model_dump()


@dataclass(frozen=True)
class EvaluationConfidence:
    """What :func:`evaluation_confidence` finds: the report's ``confidence`` and the profile rows' fields as
    report.json keeps them, and the headline's drop per metric as records, which the profile's decomposition
    takes as they are (empty without corrupted sets)."""

    headline: dict[str, Any]
    rows: dict[str, dict[str, Any]]
    drop: dict[str, PairedDifference | None]


def evaluation_confidence(
    clean: RetrievalScores, corrupted: Sequence[RetrievalScores], profile: Mapping[str, Any] | None = None,
) -> EvaluationConfidence:
    """The headline's intervals per metric (``clean`` over the queries, ``corrupted`` over the queries and the
    repeats, ``drop`` = clean − corrupted paired by query, the clean side's one draw against the repeats each
    resampled on its own; the last two None without corrupted sets), and with the ``profile``'s own sets
    (``query-side`` and each variant's scores by name, ``worst-case`` each metric's per-query worst) each
    profile row's fields by row name: its ``interval`` per metric, the BG-gap's the paired difference's
    (queries paired, and draws by draw) with its ``p_value``. The worst case is over the queries alone: each
    query's lowest score over the backgrounds is one value, so there are no draws to resample."""
    sets = {"clean": _per_metric([clean]), **({"random-bg": _per_metric(corrupted)} if corrupted else {})}
    pairs = {("drop", name): (per_query(corrupted, name), per_query([clean], name))
             for name in METRICS if corrupted}
    if profile is not None:
        sets |= {name: dict(scores) if name == "worst-case" else _per_metric(scores)
                 for name, scores in profile.items()}
        same, other = profile[GAP[0]], profile[GAP[1]]
        pairs |= {("bg-gap", name): (per_query(other, name), per_query(same, name)) for name in METRICS}
    found = query_intervals({(name, metric): by_metric[metric] for name, by_metric in sets.items()
                             for metric in METRICS})
    differences = paired_differences(pairs)
    drop = {name: differences["drop", name] for name in METRICS} if corrupted else {}
    intervals = {name: {metric: dumped(found[name, metric]) for metric in METRICS} for name in sets}
    headline = {"clean": intervals["clean"], "corrupted": intervals.get("random-bg"),
                "drop": {name: dumped(part) for name, part in drop.items()} if corrupted else None}
    rows: dict[str, dict[str, Any]] = {name: {"interval": by_metric} for name, by_metric in intervals.items()}
    if profile is not None:
        gaps = {name: differences["bg-gap", name] for name in METRICS}
        interval = {name: None if gap is None else dumped(gap.difference) for name, gap in gaps.items()}
        p_value = {name: None if gap is None else gap.p_value for name, gap in gaps.items()}
        rows["bg-gap"] = {"interval": interval, "p_value": p_value}
    return EvaluationConfidence(headline, rows, drop)


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


def dumped(found: Any) -> dict[str, Any] | None:
    """A record (an interval, a paired difference) as report.json keeps it; None stays None."""
    return None if found is None else found.model_dump()
