"""The drop split in two by the paste control (issue 50): a corrupted image differs from the clean one in
its background *and* in the seam its mask leaves, and the ``repasted`` variant (the object composited back
onto its own, inpainted background) has the seam without the new background. So

- the **paste cost**, clean − repasted, is what the compositing alone takes away;
- the **background effect**, repasted − random-bg (the paper's corrupted repeats), is what the new background
  takes away once the seam is there;

and the two add up to the drop, clean − random-bg. Each is a paired difference over the queries with its
interval and p-value (:mod:`bgbias.measurement.intervals`, defaults), from the per-query scores already
computed (the drop is the headline's own, not resampled again); the background effect is also given per
corrupted draw (mean and sample std over the repeats, as the report gives every spread), and each part as a
share of the drop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from bgbias.measurement.intervals import PairedDifference, paired_differences, per_query
from bgbias.retrieval.metrics import METRICS
from bgbias.schema import Record

if TYPE_CHECKING:
    from bgbias.retrieval.metrics import RetrievalScores

PASTE_CONTROL = "repasted"
"""The profile's variant that changes only the compositing."""


class DrawSpread(Record):
    """A difference per corrupted draw: its mean and sample std over the draws (None for one draw)."""

    mean: float | None
    std: float | None
    draws: int


class MetricDecomposition(Record):
    """One metric's drop and its two parts (each ``PairedDifference``: estimate, interval, p-value), the
    background effect per draw, and each part's share of the drop (None where the drop is 0 or None)."""

    drop: PairedDifference | None
    paste_cost: PairedDifference | None
    background_effect: PairedDifference | None
    background_effect_per_draw: DrawSpread
    paste_share: float | None
    background_share: float | None


def decompose(
    clean: RetrievalScores, corrupted: Sequence[RetrievalScores], repasted: Sequence[RetrievalScores], *,
    drop: Mapping[str, PairedDifference | None],
) -> dict[str, MetricDecomposition]:
    """Per metric, the drop (clean − corrupted), the paste cost (clean − repasted) and the background effect
    (repasted − corrupted), all over the same queries; ``corrupted`` are the paper's draws, ``repasted`` the
    control's one set. ``drop`` is the headline's (``confidence.drop``, of the same scores at the same seed),
    taken as it is rather than resampled again. The six parts are resampled in one call: those of one shape
    share the resamples of the queries, the cost on a large split."""
    sides = {metric: (per_query([clean], metric), per_query(corrupted, metric), per_query(repasted, metric))
             for metric in METRICS}
    found = paired_differences({
        (metric, part): pair for metric, (clean_m, corrupted_m, repasted_m) in sides.items()
        for part, pair in (("paste_cost", (repasted_m, clean_m)),
                           ("background_effect", (corrupted_m, repasted_m)))
    })
    decomposed = {}
    for metric, (_, corrupted_m, repasted_m) in sides.items():
        whole, paste_cost, background_effect = (drop[metric], found[metric, "paste_cost"],
                                                found[metric, "background_effect"])
        decomposed[metric] = MetricDecomposition(
            drop=whole, paste_cost=paste_cost, background_effect=background_effect,
            background_effect_per_draw=_per_draw(repasted_m, corrupted_m),
            paste_share=_share(paste_cost, whole), background_share=_share(background_effect, whole),
        )
    return decomposed


def _per_draw(repasted: np.ndarray, corrupted: np.ndarray) -> DrawSpread:
    """repasted − each corrupted draw, over the queries both score (queries alone in their class are NaN in
    every set and left out, as every mean of the report leaves them out)."""
    scored = ~(np.isnan(repasted).any(axis=0) | np.isnan(corrupted).any(axis=0))
    if not scored.any():
        return DrawSpread(mean=None, std=None, draws=len(corrupted))
    effects = repasted[:, scored].mean() - corrupted[:, scored].mean(axis=1)
    return DrawSpread(mean=float(effects.mean()),
                      std=float(effects.std(ddof=1)) if len(effects) > 1 else None, draws=len(effects))


def _share(part: PairedDifference | None, drop: PairedDifference | None) -> float | None:
    if part is None or drop is None or drop.difference.estimate == 0:
        return None
    return part.difference.estimate / drop.difference.estimate
