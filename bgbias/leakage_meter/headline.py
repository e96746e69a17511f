"""The meter's one number, the background's share ``b / (b + f)`` of what the two views retrieve above chance
in MAP@R, and its bootstrap confidence interval over images (docs/leakage.md, *The headline number*).
"""

from __future__ import annotations

import warnings

import numpy as np

BOOTSTRAP_DRAWS = 1000
"""Resamplings of the images behind the interval."""
CONFIDENCE = 0.95


def leakage_share(background: float | np.ndarray, foreground: float | np.ndarray,
                  chance: float) -> float | np.ndarray:
    """``b / (b + f)`` of the MAP@R of the two views above ``chance`` (each clipped at 0), NaN where both are
    at or below chance."""
    above_bg = np.maximum(np.asarray(background, np.float64) - chance, 0.0)
    above_fg = np.maximum(np.asarray(foreground, np.float64) - chance, 0.0)
    total = above_bg + above_fg
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(total > 0, above_bg / np.where(total > 0, total, 1.0), np.nan)
    return float(share) if share.ndim == 0 else share


def bootstrap_interval(
    background: np.ndarray, foreground: np.ndarray, chance: float, *, draws: int = BOOTSTRAP_DRAWS,
    seed: int = 0,
) -> tuple[float, float]:
    """The 95 % percentile interval of :func:`leakage_share` over ``draws`` resamplings of the images, from
    each image's own MAP@R in the two views (NaN for an image alone in its class, left out of a draw's
    means as of every mean). NaN bounds where no draw has a share."""
    background = np.asarray(background, np.float64)
    foreground = np.asarray(foreground, np.float64)
    count = len(background)
    rng = np.random.default_rng(seed)
    shares = np.empty(draws)
    block = max(1, 2_000_000 // max(count, 1))  # draws per step, so one step holds ~2M indices
    for start in range(0, draws, block):
        stop = min(draws, start + block)
        picks = rng.integers(0, count, size=(stop - start, count))
        with warnings.catch_warnings():  # a draw of lone images only has no mean: NaN, as expected
            warnings.simplefilter("ignore", RuntimeWarning)
            shares[start:stop] = leakage_share(np.nanmean(background[picks], axis=1),
                                               np.nanmean(foreground[picks], axis=1), chance)
    if np.isnan(shares).all():
        return float("nan"), float("nan")
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.nanpercentile(shares, [tail, 100 - tail])
    return float(low), float(high)

