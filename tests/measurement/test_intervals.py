"""Intervals over the queries and paired differences (bgbias.measurement.intervals) on generated per-query
scores whose answer is known."""

from __future__ import annotations

import numpy as np
import pytest

from bgbias.measurement.intervals import (
    paired_difference,
    paired_differences,
    query_interval,
    query_intervals,
)


def _scores(seed: int, queries: int = 400) -> np.ndarray:
    return np.random.default_rng(seed).beta(2, 5, queries)


def test_the_same_scores_and_seed_give_the_same_numbers_and_another_seed_other_resamples():
    first, second = _scores(0), _scores(1)
    assert paired_difference(first, second, seed=3) == paired_difference(first, second, seed=3)
    assert paired_difference(first, second, seed=3) != paired_difference(first, second, seed=4)
    assert query_interval(first, seed=3) == query_interval(first, seed=3)


def test_identical_models_differ_by_exactly_nothing():
    scores = np.stack([_scores(seed) for seed in range(5)])  # one model's five corrupted draws
    found = paired_difference(scores, scores.copy(), seed=0)
    assert (found.difference.estimate, found.difference.low, found.difference.high) == (0.0, 0.0, 0.0)
    assert found.p_value == 1.0 and found.queries == 400


def test_the_same_scores_in_one_draw_against_several_differ_by_nothing_not_by_rounding():
    one = _scores(0)
    found = paired_difference(np.stack([one, one, one]), one, seed=0)  # a control against identical draws
    assert (found.difference.estimate, found.difference.low, found.difference.high) == (0.0, 0.0, 0.0)
    assert found.p_value == 1.0


@pytest.mark.slow
def test_two_models_of_the_same_quality_are_not_told_apart_and_a_better_one_is():
    """100 seeded trials each, the issue's acceptance: two models of the same quality held 0 in at least 95
    (these seeds: exactly 95; a change of the resampling that lowers it fails here). Over 1,000 such trials
    the 95 % interval held 0 in 93.3 % of them, over 1,000 others 95.5 %: the percentile bootstrap is a
    little short of its level on 400 queries."""
    same = [paired_difference(_scores(2 * trial), _scores(2 * trial + 1), resamples=1000, seed=trial)
            for trial in range(100)]
    assert sum(found.difference.holds(0.0) for found in same) >= 95
    better = []
    for trial in range(100):
        first = _scores(1000 + trial)
        noise = np.random.default_rng(2000 + trial).normal(0.0, 0.05, first.shape)
        better.append(paired_difference(first, first + 0.03 + noise, resamples=1000, seed=trial))
    assert all(not found.difference.holds(0.0) and found.p_value < 0.05 for found in better)
    assert all(found.difference.low > 0 for found in better)


def test_the_interval_widens_with_the_spread_of_the_draws_and_with_the_level():
    base = _scores(0)
    draws = base + np.array([[-0.1], [-0.05], [0.0], [0.05], [0.1]])  # each draw shifts every query alike
    over_draws = query_interval(draws, seed=0)
    over_queries = query_interval(draws.mean(axis=0), seed=0)
    assert over_draws.estimate == pytest.approx(over_queries.estimate)
    assert over_draws.high - over_draws.low > 2 * (over_queries.high - over_queries.low)
    wide = query_interval(base, level=0.99, seed=0)
    narrow = query_interval(base, seed=0)
    assert wide.low < narrow.low < narrow.estimate < narrow.high < wide.high


def test_queries_alone_in_their_class_are_left_out_of_both_sides():
    first, second = _scores(0, 10), _scores(1, 10)
    first[2], second[7] = np.nan, np.nan
    found = paired_difference(first, second, seed=0)
    kept = np.ones(10, bool)
    kept[[2, 7]] = False
    assert found.queries == 8
    assert found.difference.estimate == pytest.approx(second[kept].mean() - first[kept].mean())
    assert query_interval(first, seed=0).estimate == pytest.approx(np.nanmean(first))


def test_sides_of_other_queries_or_shapes_are_refused():
    with pytest.raises(ValueError, match="the same queries in the same order"):
        paired_difference(_scores(0, 10), _scores(1, 11))
    with pytest.raises(ValueError, match=r"\(queries,\) or \(draws, queries\)"):
        query_interval(np.zeros((2, 3, 4)))


def test_two_models_scored_on_the_same_draws_are_paired_by_draw():
    """A draw that is harder for both (its backgrounds) moves both sides alike and cancels in the
    difference; clean against corrupted draws keeps the draws' spread."""
    shifts = np.array([[-0.1], [-0.05], [0.0], [0.05], [0.1]])
    first = _scores(0) + shifts
    found = paired_difference(first, first + 0.02, seed=0)
    assert found.difference.estimate == pytest.approx(0.02)
    assert found.difference.low == pytest.approx(0.02) and found.difference.high == pytest.approx(0.02)
    against_clean = paired_difference(_scores(0), first + 0.02, seed=0)
    assert against_clean.difference.high - against_clean.difference.low > 0.05


def test_no_scored_query_has_no_interval_and_lone_queries_are_left_out():
    lone = np.full(5, np.nan)
    assert query_interval(lone) is None and paired_difference(lone, _scores(0, 5)) is None
    scores = _scores(0, 6)
    scores[2] = np.nan
    found = paired_difference(scores, scores + 0.1)
    assert found.queries == 5 and found.difference.estimate == pytest.approx(0.1)


def test_draws_of_as_many_but_other_backgrounds_are_resampled_apart_when_asked():
    base = _scores(0)
    draws = base + np.array([[-0.1], [0.0], [0.1]])  # each draw shifts every query alike
    paired = paired_difference(draws, draws.copy(), seed=0)
    apart = paired_difference(draws, draws.copy(), seed=0, paired_draws=False)
    assert (paired.difference.low, paired.difference.high) == (0.0, 0.0)
    assert apart.difference.estimate == 0.0 and apart.difference.low < -0.02 and apart.difference.high > 0.02


def test_many_at_once_give_each_the_numbers_it_gets_alone():
    """Sets of as many draws over the same scored queries share their resamples (drawn once, the cost of a
    large test set), sets of other shapes or other scored queries get their own; each number is the one a
    call of its own gives."""
    draws = np.stack([_scores(seed) for seed in range(5)])
    lone = _scores(7)
    lone[3] = np.nan
    sets = {"clean": _scores(5), "other": _scores(6), "draws": draws, "lone": lone,
            "none": np.full(400, np.nan)}
    assert query_intervals(sets, resamples=300) == {key: query_interval(scores, resamples=300)
                                                    for key, scores in sets.items()}
    pairs = {"drop": (draws, sets["clean"]), "gap": (draws, draws[::-1] + 0.01),
             "lone": (lone, sets["other"]), "clean": (sets["clean"], sets["other"])}
    assert paired_differences(pairs, resamples=300) == {key: paired_difference(*pair, resamples=300)
                                                        for key, pair in pairs.items()}
