"""The paper's foreground score (eqs. 2–4): closed-form cases, soft masks, undefined cases and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from bgbias.attribution.foreground_score import (
    attribution_on_foreground,
    foreground_fraction,
    foreground_score,
)
from bgbias.errors import OptionError


def square_mask(size: int = 8, low: int = 2, high: int = 6) -> np.ndarray:
    mask = np.zeros((size, size))
    mask[low:high, low:high] = 1.0
    return mask


def test_fraction_is_the_share_of_foreground_pixels():
    assert foreground_fraction(square_mask()) == pytest.approx(16 / 64)
    assert foreground_fraction(np.full((3, 5), 0.5)) == pytest.approx(0.5)


def test_all_attribution_inside_the_mask_scores_one():
    mask = square_mask()
    attribution = mask * np.arange(64).reshape(8, 8)
    assert attribution_on_foreground(mask, attribution) == pytest.approx(1.0)
    assert foreground_score(mask, attribution) == pytest.approx(1.0)


def test_uniform_attribution_scores_zero():
    mask = square_mask()
    assert attribution_on_foreground(mask, np.ones((8, 8))) == pytest.approx(0.25)
    assert foreground_score(mask, np.full((8, 8), 0.3)) == pytest.approx(0.0)


def test_all_attribution_on_the_background_scores_minus_f_over_one_minus_f():
    mask = square_mask()
    f = foreground_fraction(mask)
    assert foreground_score(mask, 1.0 - mask) == pytest.approx(-f / (1 - f))
    assert foreground_score(mask, 1.0 - mask) == pytest.approx(-1 / 3)


def test_soft_masks_weight_each_pixel_by_its_mask_value():
    mask = np.array([[1.0, 0.5], [0.0, 0.5]])
    attribution = np.array([[2.0, 2.0], [0.0, 0.0]])
    f = 2.0 / 4
    a = (1.0 * 2 + 0.5 * 2) / 4
    assert foreground_fraction(mask) == pytest.approx(f)
    assert attribution_on_foreground(mask, attribution) == pytest.approx(a)
    assert foreground_score(mask, attribution) == pytest.approx((a - f) / (1 - f))


def test_an_empty_mask_gets_no_share_and_scores_zero():
    mask = np.zeros((4, 4))
    assert attribution_on_foreground(mask, np.ones((4, 4))) == 0.0
    assert foreground_score(mask, np.ones((4, 4))) == 0.0


def test_undefined_cases_are_nan():
    assert np.isnan(foreground_score(np.ones((4, 4)), np.ones((4, 4))))  # mask covers everything: f = 1
    assert np.isnan(attribution_on_foreground(square_mask(), np.zeros((8, 8))))
    assert np.isnan(foreground_score(square_mask(), np.zeros((8, 8))))


def test_bad_input_is_an_option_error():
    mask = square_mask()
    with pytest.raises(OptionError, match="non-negative"):
        foreground_score(mask, -np.ones((8, 8)))
    with pytest.raises(OptionError, match="does not match"):
        foreground_score(mask, np.ones((8, 7)))
    with pytest.raises(OptionError, match="finite"):
        attribution_on_foreground(mask, np.full((8, 8), np.nan))
    with pytest.raises(OptionError, match=r"\[0, 1\]") as raised:
        foreground_fraction(mask * 255)
    assert "255" in raised.value.fix
    with pytest.raises(OptionError, match=r"\(h, w\)"):
        foreground_fraction(np.ones((2, 2, 2)))
