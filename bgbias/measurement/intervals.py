"""How sure a score is on this data: bootstrap intervals over the query images (and over the corrupted draws
where there are several), and paired differences of two scores that share their queries (clean vs corrupted,
vanilla vs BGAugment, model A vs model B), each with its interval and a two-sided p-value (issue 50).

Both start from the per-query scores an evaluation already computed, so nothing is embedded or searched
again, and both are seeded: the same scores give the same numbers. Queries alone in their class (NaN) are left
out, as every mean of the reports leaves them out. Training seeds are not resampled here: their spread stays a
separate, named source (``bgbias.report.seeds``).

The interval is the percentile bootstrap; the p-value is the one that interval inverts (twice the share of
resampled differences on the far side of 0), so an interval at level 1 − α excludes 0 exactly when the
p-value is below α (up to the resamples' granularity).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from bgbias.schema import Record

if TYPE_CHECKING:
    from bgbias.retrieval.metrics import RetrievalScores

RESAMPLES = 2000
"""Bootstrap resamples: the p-value's granularity is 1 / (RESAMPLES + 1)."""

LEVEL = 0.95

ROUNDING = 1e-12
"""Differences of means closer to 0 than this are 0: the same scores averaged in another order (one draw on
one side, several on the other) differ by rounding alone, which must not read as a difference."""

_CHUNK_VALUES = 1 << 22
"""Query counts drawn at once (4 Mi of them): bounds the memory of a large test set."""

Key = TypeVar("Key", bound=Hashable)


class Interval(Record):
    """A score (``estimate``, the mean over the queries and draws given) and its bootstrap interval, as
    report.json keeps it."""

    estimate: float
    low: float
    high: float
    level: float

    def holds(self, value: float) -> bool:
        return self.low <= value <= self.high


class PairedDifference(Record):
    """``second − first`` over the queries both scored: its interval, the two-sided p-value of no
    difference, and the number of queries it rests on."""

    difference: Interval
    p_value: float
    queries: int


class IntervalSettings(Record):
    """How a report's intervals were made, stated once in it."""

    method: str = "percentile bootstrap over the queries, and over the draws where there are several"
    resamples: int = RESAMPLES
    level: float = LEVEL
    seed: int = 0


def query_interval(scores: np.ndarray, *, resamples: int = RESAMPLES, level: float = LEVEL,
                   seed: int = 0) -> Interval | None:
    """The mean of per-query ``scores`` — (N,) for one set, (R, N) for R draws of the same N queries — with
    its bootstrap interval: the queries resampled with replacement, and the draws too where there are
    several. None where no query is scored."""
    return query_intervals({0: scores}, resamples=resamples, level=level, seed=seed)[0]


def query_intervals(sets: Mapping[Key, np.ndarray], *, resamples: int = RESAMPLES, level: float = LEVEL,
                    seed: int = 0) -> dict[Key, Interval | None]:
    """:func:`query_interval` of each of ``sets``, the same numbers at the cost of far fewer: sets of as
    many draws over the same scored queries take the same resamples of the queries and the draws (the seed's
    resamples depend on those counts alone), so those are drawn once for all of them. On 60,502 queries the
    resamples of the queries are most of the cost."""
    found: dict[Key, Interval | None] = {}
    shared: dict[tuple[object, ...], list[tuple[Key, np.ndarray]]] = {}
    for key, scores in sets.items():
        draws = _draws(scores)
        scored = ~np.isnan(draws).any(axis=0)
        found[key] = None
        if scored.any():
            shared.setdefault((draws.shape, scored.tobytes()), []).append((key, draws[:, scored]))
    for members in shared.values():
        sides = [side for _, side in members]
        means = _bootstrap(sides, resamples, seed, [0] * len(sides))
        for (key, side), resampled in zip(members, means, strict=True):
            found[key] = _interval(float(side.mean()), resampled, level)
    return found


def paired_difference(first: np.ndarray, second: np.ndarray, *, resamples: int = RESAMPLES,
                      level: float = LEVEL, seed: int = 0,
                      paired_draws: bool = True) -> PairedDifference | None:
    """``second − first``, each (N,) or (R, N) per-query scores of the same N queries in the same order:
    the same resampled queries are taken from both (they are paired). Two sides of as many draws are paired
    by draw too (draw r of each is the same backgrounds, as two models scored on one seed's sets have them),
    where ``paired_draws`` (False: as many draws, but of other backgrounds); otherwise (clean against its
    corrupted draws) each side's draws are resampled on their own. None where no query is scored on both
    sides."""
    return paired_differences({0: (first, second)}, resamples=resamples, level=level, seed=seed,
                              paired_draws=paired_draws)[0]


def paired_differences(pairs: Mapping[Key, tuple[np.ndarray, np.ndarray]], *, resamples: int = RESAMPLES,
                       level: float = LEVEL, seed: int = 0,
                       paired_draws: bool = True) -> dict[Key, PairedDifference | None]:
    """:func:`paired_difference` of each ``(first, second)`` of ``pairs``, the same numbers, drawn once for
    the pairs whose sides have as many draws over the same scored queries (as :func:`query_intervals`)."""
    found: dict[Key, PairedDifference | None] = {}
    shared: dict[tuple[object, ...], list[tuple[Key, np.ndarray, np.ndarray]]] = {}
    for key, (first, second) in pairs.items():
        first, second = _draws(first), _draws(second)
        if first.shape[1] != second.shape[1]:
            raise ValueError(f"the two sides score {first.shape[1]} and {second.shape[1]} queries: a paired "
                             "difference needs the same queries in the same order")
        both = ~(np.isnan(first).any(axis=0) | np.isnan(second).any(axis=0))
        found[key] = None
        if both.any():
            shared.setdefault((first.shape, second.shape, both.tobytes()), []).append(
                (key, first[:, both], second[:, both]))
    for members in shared.values():
        paired = paired_draws and len(members[0][1]) == len(members[0][2])
        sides = [side for _, first, second in members for side in (first, second)]
        means = _bootstrap(sides, resamples, seed, [0, 0 if paired else 1] * len(members))
        for index, (key, first, second) in enumerate(members):
            differences = _snapped(means[2 * index + 1] - means[2 * index])
            estimate = float(_snapped(np.array(second.mean() - first.mean())))
            far_side = min(np.count_nonzero(differences <= 0), np.count_nonzero(differences >= 0))
            p_value = min(1.0, 2 * (int(far_side) + 1) / (resamples + 1))
            found[key] = PairedDifference(difference=_interval(estimate, differences, level), p_value=p_value,
                                          queries=first.shape[1])
    return found


def per_query(scores: Sequence[RetrievalScores], metric: str) -> np.ndarray:
    """One metric's per-query scores of ``scores`` (the draws of one set, the same queries in the same order)
    as the (draws, queries) array the functions above take."""
    return np.stack([draw.per_query[metric] for draw in scores])


def _draws(scores: np.ndarray) -> np.ndarray:
    """Per-query scores as (draws, queries) float64."""
    array = np.asarray(scores, dtype=np.float64)
    if array.ndim == 1:
        array = array[None]
    if array.ndim != 2 or array.shape[1] == 0:
        raise ValueError(f"per-query scores must be (queries,) or (draws, queries), got shape {array.shape}")
    return array


def _bootstrap(sides: list[np.ndarray], resamples: int, seed: int, groups: Sequence[int]) -> list[np.ndarray]:
    """For each resample, each side's mean (sides are (draws, N) over the same N queries): one resample of
    the queries shared by every side, and one of the draws per group of sides (``groups[i]`` is side i's;
    the sides of a group have as many draws, and share them: paired), the groups drawn in order. A resample
    of the queries is their counts, so a side's per-draw means are one matrix product (one per side: a
    side's numbers do not depend on the sides it is drawn with)."""
    rng = np.random.default_rng(seed)
    count = sides[0].shape[1]
    means = [np.empty(resamples) for _ in sides]
    draws = {group: len(side) for group, side in zip(groups, sides, strict=True)}
    chunk = max(1, _CHUNK_VALUES // count)
    for start in range(0, resamples, chunk):
        size = min(chunk, resamples - start)
        picks = rng.integers(0, count, size=(size, count)) + count * np.arange(size)[:, None]
        weights = np.bincount(picks.ravel(), minlength=size * count).reshape(size, count) / count
        drawn = {group: rng.integers(0, many, size=(size, many)) for group, many in draws.items()}
        for side, group, values in zip(sides, groups, means, strict=True):
            per_draw = weights @ side.T  # (size, draws): each draw's mean over the resampled queries
            values[start:start + size] = np.take_along_axis(per_draw, drawn[group], axis=1).mean(axis=1)
    return means


def _snapped(differences: np.ndarray) -> np.ndarray:
    """``differences`` with those within :data:`ROUNDING` of 0 set to 0."""
    return np.where(np.abs(differences) < ROUNDING, 0.0, differences)


def _interval(estimate: float, resampled: np.ndarray, level: float) -> Interval:
    tail = (1 - level) / 2
    low, high = np.quantile(resampled, [tail, 1 - tail])
    return Interval(estimate=estimate, low=float(low), high=float(high), level=level)
