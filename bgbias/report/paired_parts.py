"""The drop's two parts by the paste control (:mod:`bgbias.measurement.decomposition`) per query, for a
comparison of two evaluations (:mod:`bgbias.report.paired`): on each side the paste cost, clean − repasted,
and the background effect, repasted − corrupted, paired as the drop is (queries paired, the corrupted draws as
the comparison pairs them). Per query the two add up to the drop, so the two differences add up to the drop's.
"""

from __future__ import annotations

import numpy as np

from bgbias.measurement.decomposition import PASTE_CONTROL
from bgbias.report.per_query import PerQueryScores

PASTE_COST = "paste_cost"
BACKGROUND_EFFECT = "background_effect"


def drop_parts(first: PerQueryScores, second: PerQueryScores,
               metric: str) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """``(metric, part)`` → both sides' per-query scores of the part, (draws, queries) each: the paste cost
    over the paste control's draws, the background effect over the corrupted draws (less the control's mean
    over its draws, its one set as bgbias makes it); none where a side lacks the paste control or corrupted
    sets."""
    if any(PASTE_CONTROL not in scores.variants or not scores.repeats for scores in (first, second)):
        return {}
    sides = [_parts(scores, metric) for scores in (first, second)]
    return {(metric, part): (sides[0][part], sides[1][part]) for part in (PASTE_COST, BACKGROUND_EFFECT)}


def _parts(scores: PerQueryScores, metric: str) -> dict[str, np.ndarray]:
    repasted = scores.variants[PASTE_CONTROL][metric]
    return {PASTE_COST: scores.clean[metric][None] - repasted,
            BACKGROUND_EFFECT: repasted.mean(axis=0)[None] - scores.corrupted[metric]}
