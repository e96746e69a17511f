"""The paper's foreground attribution score (Kobs & Hotho, eqs. 2–4), as pure numpy functions.

The score subtracts the chance level (the object's area share) and rescales: 1 is all attribution on the
object, 0 no preference, negative the background drawing more than its area. Undefined cases (a mask covering
the whole image, a map with no attribution) are NaN, not an error, so a caller can count them.
"""

from __future__ import annotations

import numpy as np

from bgbias.errors import OptionError


def foreground_fraction(mask: np.ndarray) -> float:
    """f(M) = Σ M / (w·h): the share of the image that a soft mask M ∈ [0, 1]^{h×w} calls foreground."""
    return _fraction(_checked_mask(mask))


def attribution_on_foreground(mask: np.ndarray, attribution: np.ndarray) -> float:
    """a(M, A) = Σ M·A / Σ A: the share of a non-negative attribution map that lies on the foreground.

    NaN when the map sums to 0 (nothing to share out).
    """
    return _share(*_checked_pair(mask, attribution))


def foreground_score(mask: np.ndarray, attribution: np.ndarray) -> float:
    """(a − f) / (1 − f) ∈ (−∞, 1]: attribution on the foreground beyond what the foreground's area explains.

    NaN when the mask covers the whole image (f = 1) or the map sums to 0.
    """
    mask, attribution = _checked_pair(mask, attribution)
    fraction, share = _fraction(mask), _share(mask, attribution)
    if fraction >= 1.0 or np.isnan(share):
        return float("nan")
    return (share - fraction) / (1.0 - fraction)


def _fraction(mask: np.ndarray) -> float:
    return float(mask.sum() / mask.size)


def _share(mask: np.ndarray, attribution: np.ndarray) -> float:
    total = attribution.sum()
    return float("nan") if total == 0 else float((mask * attribution).sum() / total)


def _checked_mask(mask: np.ndarray) -> np.ndarray:
    mask = np.asarray(mask, dtype=np.float64)
    if mask.ndim != 2 or mask.size == 0:
        raise OptionError(
            f"a foreground mask must be a non-empty (h, w) array, got shape {mask.shape}",
            fix="pass one soft mask per image, with values in [0, 1]",
        )
    if not np.all((mask >= 0) & (mask <= 1)):
        raise OptionError(
            f"foreground mask values must lie in [0, 1], got [{np.nanmin(mask)}, {np.nanmax(mask)}]",
            fix="divide an 8-bit mask by 255 before scoring",
        )
    return mask


def _checked_pair(mask: np.ndarray, attribution: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mask = _checked_mask(mask)
    attribution = np.asarray(attribution, dtype=np.float64)
    if attribution.shape != mask.shape:
        raise OptionError(
            f"attribution map of shape {attribution.shape} does not match the mask's shape {mask.shape}",
            fix="compute the map on the same eval crop as the mask (eval_transform_pair)",
        )
    if not np.all(np.isfinite(attribution)):
        raise OptionError(
            "attribution maps must be finite (found NaN or inf)", fix="check the attribution method's output"
        )
    if np.any(attribution < 0):
        raise OptionError(
            f"attribution maps must be non-negative (smallest value {attribution.min()})",
            fix="take absolute values of signed attributions (as SmoothGrad does) before scoring",
        )
    return mask, attribution
