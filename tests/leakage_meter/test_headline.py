"""The meter's headline: the background's share of what both views retrieve above chance, and its interval."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bgbias.leakage_meter.headline import bootstrap_interval, leakage_share


def test_the_share_of_what_the_background_retrieves_above_chance():
    assert leakage_share(0.6, 0.6, 0.2) == pytest.approx(0.5)
    assert leakage_share(0.9, 0.2, 0.2) == pytest.approx(1.0)
    assert leakage_share(0.1, 0.5, 0.2) == pytest.approx(0.0)  # below chance counts as chance
    assert math.isnan(leakage_share(0.2, 0.1, 0.2))  # neither retrieves anything: no share
    assert np.allclose(leakage_share(np.array([0.6, 0.2]), np.array([0.2, 0.6]), 0.2), [1.0, 0.0])


def test_the_interval_holds_the_share_narrows_with_images_and_is_seeded():
    rng = np.random.default_rng(0)

    def views(count):
        return rng.uniform(0.3, 0.7, count), rng.uniform(0.1, 0.5, count)

    small, large = bootstrap_interval(*views(40), 0.1), bootstrap_interval(*views(4000), 0.1)
    share = (0.5 - 0.1) / ((0.5 - 0.1) + (0.3 - 0.1))
    assert small[0] < share < small[1] and large[0] < share < large[1]
    assert large[1] - large[0] < (small[1] - small[0]) / 5
    background, foreground = views(50)
    foreground[0] = np.nan  # an image alone in its class
    assert bootstrap_interval(background, foreground, 0.1, seed=3) == bootstrap_interval(
        background, foreground, 0.1, seed=3)
    assert not any(math.isnan(bound) for bound in bootstrap_interval(background, foreground, 0.1))


def test_no_share_in_any_draw_gives_no_interval():
    low, high = bootstrap_interval(np.full(10, 0.1), np.full(10, 0.1), 0.2)
    assert math.isnan(low) and math.isnan(high)
