"""Two evaluations of the same queries compared (vanilla against BGAugment on the study page, a model against
the one ranked above it on the audit page, ``bgbias.compare_evaluations``): per metric, ``second − first`` of
the clean score, of the corrupted score, of the drop and of its two parts by the paste control where both
evaluations scored it (:mod:`bgbias.report.paired_parts`), each with its interval over the test queries (and
the background draws) and its p-value (:func:`~bgbias.measurement.intervals.paired_differences`).

Nothing is evaluated again: both folders' ``per_query.csv`` are read (:mod:`bgbias.report.per_query`). Queries
are paired; the corrupted draws are paired by draw only where both evaluations scored the same corrupted sets
(the same manifests), else each side's draws are resampled apart, and the comparison says which. Training
seeds are not resampled: their spread stays separate (:mod:`bgbias.report.seeds`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bgbias.errors import OptionError, RecordError
from bgbias.measurement.intervals import IntervalSettings, PairedDifference, paired_differences
from bgbias.measurement.record import EvaluationReport
from bgbias.report.evaluation import load_evaluation_report
from bgbias.report.paired_parts import BACKGROUND_EFFECT, PASTE_COST, drop_parts
from bgbias.report.per_query import FIX, PerQueryScores, read_per_query
from bgbias.retrieval.metrics import METRICS
from bgbias.schema import Record

PAIRED_DRAWS = "paired by draw: both scored the same corrupted sets (the same manifests)"
APART_DRAWS = "resampled apart: the two evaluations scored different corrupted sets"
NO_DRAWS = "none: an evaluation without corrupted sets"


class MetricDifference(Record):
    """One metric, ``second − first``: the clean score, the corrupted score (mean over the repeats) and the
    drop (clean − corrupted), and the drop's two parts by the paste control
    (:mod:`~bgbias.measurement.decomposition`): the paste cost (clean − repasted) and the background effect
    (repasted − corrupted); None where a side has no corrupted sets (or, for the parts, no ``repasted`` set)
    or no query is scored on both."""

    clean: PairedDifference | None
    corrupted: PairedDifference | None
    drop: PairedDifference | None
    paste_cost: PairedDifference | None
    background_effect: PairedDifference | None


class EvaluationComparison(Record):
    """Two evaluation folders' paired differences, ``second − first``, per metric, with how the corrupted
    draws were resampled and the settings of the intervals."""

    first: str
    second: str
    queries: int
    repeats: list[int]
    """Each side's corrupted repeats, first then second."""
    draws: str
    """How the corrupted draws were resampled: :data:`PAIRED_DRAWS`, :data:`APART_DRAWS` or
    :data:`NO_DRAWS`."""
    intervals: IntervalSettings
    metrics: dict[str, MetricDifference]


def compare_evaluations(first: str | os.PathLike[str], second: str | os.PathLike[str],
                        metrics: Sequence[str] = METRICS) -> EvaluationComparison:
    """``second − first`` of two evaluation folders (each with ``report.json`` and ``per_query.csv``) of the
    same queries in the same order, for each of ``metrics``; two evaluations of other queries are an
    ``OptionError`` naming the first query where they part."""
    sides = [_read(Path(folder)) for folder in (first, second)]
    (first_report, first_scores), (second_report, second_scores) = sides
    _check_same_queries(first_scores, second_scores)
    repeats = [first_scores.repeats, second_scores.repeats]
    draws = NO_DRAWS if 0 in repeats else PAIRED_DRAWS if _same_sets(first_report, second_report) \
        else APART_DRAWS
    settings = IntervalSettings()
    options: dict[str, Any] = {"resamples": settings.resamples, "level": settings.level,
                               "seed": settings.seed}
    # Two batched calls, the same numbers as one call each: the clean differences (one draw a side) share one
    # resampling of the queries, the corrupted and drop ones (each side's repeats) another, where one call per
    # difference would resample them nine times: most of the cost on a large split.
    clean = paired_differences({metric: (first_scores.clean[metric], second_scores.clean[metric])
                                for metric in metrics}, **options)
    repeated: dict[tuple[str, str], PairedDifference | None] = {}
    if draws != NO_DRAWS:
        pairs = {}
        for metric in metrics:
            first_drops, second_drops = (scores.clean[metric][None] - scores.corrupted[metric]
                                         for scores in (first_scores, second_scores))
            pairs[metric, "corrupted"] = (first_scores.corrupted[metric], second_scores.corrupted[metric])
            pairs[metric, "drop"] = (first_drops, second_drops)
            # Each part's own resampling group (by shape): the numbers above are the same with or without it.
            pairs.update(drop_parts(first_scores, second_scores, metric))
        repeated = paired_differences(pairs, paired_draws=draws == PAIRED_DRAWS, **options)
    found = {metric: MetricDifference(clean=clean[metric], corrupted=repeated.get((metric, "corrupted")),
                                      drop=repeated.get((metric, "drop")),
                                      paste_cost=repeated.get((metric, PASTE_COST)),
                                      background_effect=repeated.get((metric, BACKGROUND_EFFECT)))
             for metric in metrics}
    return EvaluationComparison(first=str(first), second=str(second), queries=len(first_scores.ids),
                                repeats=repeats, draws=draws, intervals=settings, metrics=found)


def _read(folder: Path) -> tuple[EvaluationReport, PerQueryScores]:
    """An evaluation folder's report and per-query scores, checked to be of the same evaluation (as many
    queries, as many repeats)."""
    report = load_evaluation_report(folder / "report.json")
    scores = read_per_query(folder)
    repeats = len(report.corrupted.repeats) if report.corrupted else 0
    if (len(scores.ids), scores.repeats) != (report.images, repeats):
        raise RecordError(f"the per-query file has {len(scores.ids)} queries and {scores.repeats} corrupted "
                          f"repeats, its report.json {report.images} and {repeats}", path=scores.path,
                          fix=FIX)
    return report, scores


def _check_same_queries(first: PerQueryScores, second: PerQueryScores) -> None:
    if first.ids == second.ids:
        return
    fix = "compare two evaluations of the same dataset and split, with the same --limit"
    if len(first.ids) != len(second.ids):
        raise OptionError(f"the two evaluations scored {len(first.ids)} and {len(second.ids)} queries: a "
                          "paired comparison needs the same queries", path=second.path, fix=fix)
    row, one, other = next((row, one, other) for row, (one, other)
                           in enumerate(zip(first.ids, second.ids, strict=True), 1) if one != other)
    raise OptionError(f"the two evaluations scored other queries, or in another order: query {row} is "
                      f"{one!r} in {first.path} and {other!r} here", path=second.path, fix=fix)


def _same_sets(first: EvaluationReport, second: EvaluationReport) -> bool:
    """Whether both evaluations scored the same corrupted sets: the same manifests, by sha256, in the same
    order (``corrupted_sets`` of report.json); a report that does not list them pairs nothing."""
    hashes = _manifest_hashes(first)
    return hashes is not None and hashes == _manifest_hashes(second)


def _manifest_hashes(report: EvaluationReport) -> list[str] | None:
    record = (report.model_extra or {}).get("corrupted_sets")
    manifests = record.get("manifests") if isinstance(record, dict) else None
    if not isinstance(manifests, list) or not manifests:
        return None
    hashes = [manifest.get("sha256") if isinstance(manifest, dict) else None for manifest in manifests]
    return hashes if all(isinstance(value, str) for value in hashes) else None


def draws_cell(comparison: EvaluationComparison) -> str:
    """How the corrupted draws were resampled, in a table cell's words: ``paired by draw``, ``resampled
    apart`` or ``none``."""
    return comparison.draws.split(":")[0]


def settings_words(settings: IntervalSettings) -> str:
    """How the intervals and p-values were made, in a sentence's words."""
    return (f"{settings.method}; {settings.resamples} resamples, {100 * settings.level:g} % intervals, "
            f"seed {settings.seed}")
