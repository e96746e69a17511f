"""Is #1 really ahead of #2? Each model of an audit's ranking against the model ranked just above it, over
the test queries and background draws both were scored on (:func:`~bgbias.report.paired.compare_evaluations`
of their evaluation folders): the difference of corrupted and clean MAP@R with its interval and p-value.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

from bgbias.measurement.intervals import IntervalSettings
from bgbias.model_audit.outcome import ModelOutcome
from bgbias.report.differences import p_cell, signed_points
from bgbias.report.document import Paragraph, Table
from bgbias.report.paired import (
    EvaluationComparison,
    compare_evaluations,
    draws_cell,
    settings_words,
)
from bgbias.schema import Record


class AdjacentComparison(Record):
    """Two models of adjacent ranks: ``comparison`` is the one ranked ``rank`` (``above``) minus the next
    (``below``), so a positive difference says the ranking's order holds."""

    rank: int
    above: str
    below: str
    comparison: EvaluationComparison


def adjacent_comparisons(ranked: Sequence[tuple[int, ModelOutcome]],
                         out: Path) -> tuple[AdjacentComparison, ...]:
    """For each ranked model (rank, outcome; best first) and the next one, both with an evaluation folder
    (``ModelOutcome.report``, relative to the audit's folder ``out`` where it lies inside): the model above
    minus the one below, of MAP@R."""
    found = []
    for (rank, above), (_, below) in itertools.pairwise(ranked):
        if above.report is None or below.report is None:
            continue
        comparison = compare_evaluations(out / below.report, out / above.report, metrics=("map_at_r",))
        # The folders as the outcomes name them: audit.json holds no path of the machine it was made on.
        comparison = comparison.model_copy(update={"first": below.report, "second": above.report})
        found.append(AdjacentComparison(rank=rank, above=above.label, below=below.label,
                                        comparison=comparison))
    return tuple(found)


def comparison_blocks(found: Sequence[AdjacentComparison]) -> list[Paragraph | Table]:
    """The page's table of adjacent ranks, and how to read it; nothing with fewer than two ranked models."""
    if not found:
        return []
    level = f"{100 * IntervalSettings().level:g} %"
    rows = []
    for pair in found:
        metric = pair.comparison.metrics["map_at_r"]
        rows.append((f"#{pair.rank} − #{pair.rank + 1}", pair.above, pair.below,
                     signed_points(metric.corrupted), p_cell(metric.corrupted), signed_points(metric.clean),
                     p_cell(metric.clean),
                     draws_cell(pair.comparison)))
    headers = ("ranks", "above", "below", f"Δ corrupted MAP@R [{level}]", "p", f"Δ clean MAP@R [{level}]",
               "p", "background draws")
    return [
        Paragraph("Each model against the one ranked just above it (above − below, points of MAP@R), over "
                  "the test queries and background draws both were scored on: an interval that holds 0 (p "
                  f"above {1 - IntervalSettings().level:.2f}) says this split cannot tell the two apart "
                  f"({settings_words(IntervalSettings())})."),
        Table(headers, tuple(rows), caption="is each rank really ahead of the next?"),
    ]
