"""The study page's reading of how much the masks decide: for every run whose evaluation scored its corrupted
repeats with a second source's masks too (``bgbias eval --compare-masks``), the corrupted MAP@R with each, the
paired difference with its interval and p-value, and the masks' mean IoU."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from bgbias.measurement.record import EvaluationReport, MaskSensitivity
from bgbias.report.differences import p_cell, signed_points
from bgbias.report.document import Block, Bullets, Code, Heading, Paragraph, Table
from bgbias.report.evaluation import percent_spread

HEADERS = ("run", "corrupted MAP@R, first masks (%)", "second masks (%)",
           "second − first (points, 95 % interval)", "p", "mean IoU")


def mask_sensitivity_section(reports: Sequence[EvaluationReport]) -> list[Block]:
    """The section, or nothing where no run's evaluation has the reading."""
    read = [(report, report.mask_sensitivity) for report in reports if report.mask_sensitivity is not None]
    if not read:
        return []
    sources = Counter((s.first.masks, s.second.masks) for _, s in read)
    pairs = tuple((Code(first), " then ", Code(second), f": {count} runs") for (first, second), count
                  in sorted(sources.items()))
    return [
        Heading("How much do the masks decide"),
        Paragraph("The corrupted repeats cut out with a second source's masks, from the same manifests "
                  "(same backgrounds), each run's difference paired by query and by background draw. An "
                  "interval that holds 0: the mask source does not move the corrupted score beyond chance. "
                  "Masks (first then second):"),
        Bullets(pairs),
        Table(HEADERS, tuple(_row(report, sensitivity) for report, sensitivity in read)),
    ]


def _row(report: EvaluationReport, sensitivity: MaskSensitivity) -> tuple[str, ...]:
    first = report.corrupted
    paired = sensitivity.difference["map_at_r"]
    return (f"{report.label}, seed {report.seed}",
            "" if first is None else percent_spread(first.mean.map_at_r, first.std.map_at_r),
            percent_spread(sensitivity.corrupted.mean.map_at_r, sensitivity.corrupted.std.map_at_r),
            signed_points(paired), p_cell(paired),
            f"{sensitivity.agreement.mean:.3f}")
