"""The background-reliance profile's variants of an image, after Xiao et al.'s backgrounds challenge: pure
functions of pixels, nothing random. A mixed variant's donor, the one random choice, is sampled apart
(:mod:`bgbias.variants.variant_manifests`) and given to :func:`render_variant`; every blend is
:func:`~bgbias.bgaugment.composite.composite` with the soft mask as it is, at the evaluation crop.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from bgbias.bgaugment.composite import composite_pixels
from bgbias.errors import OptionError
from bgbias.options import FILL, choices

ONLY_FG_FILL = (0, 0, 0)
"""The constant the object stands on in only-fg: black, as in Xiao et al.'s Only-FG."""
OBJECT_THRESHOLD = 13
"""Mask values from here up (5 %) are the object where the hole to fill is bounded: a soft edge's halo of
object colour must not be tiled into the hole. Blends always use the soft mask."""
FILLS = choices(FILL)
"""How :func:`without_object` fills the object's hole (:data:`bgbias.options.FILL`)."""
INPAINT_RADIUS = 3
"""Pixels around each hole pixel that OpenCV's Telea inpainting draws from."""
DILATION = 0.02
"""How far the region :func:`background_only` removes reaches beyond the object, as a share of the crop's
side (5 px at 227)."""


@dataclass(frozen=True)
class Variant:
    """A variant of a split: its name, how a report titles it, and the rule a manifest records (a manifest
    made by another rule is refused). ``donor``: None, or ``"same"`` / ``"other"`` class."""

    name: str
    title: str
    rule: str
    donor: str | None = None


_DONOR = "D the donor's m*T + (1-m)*x"
_TILED = (f"T tiles the largest strip of the image outside the bounding box of mask >= {OBJECT_THRESHOLD} "
          "(the background's mean colour where no strip is left)")
_INPAINTED = (f"x with M painted in from around it by OpenCV's Telea inpainting (radius {INPAINT_RADIUS}); "
              f"M the mask >= {OBJECT_THRESHOLD} dilated by a disc of radius "
              f"max(1, round({DILATION} * crop)) px (black where M covers the frame)")
_REPASTED = (f"m*x + (1-m)*B, B = only-bg-inpainted: {_INPAINTED}; the object pasted back onto its own "
             "background as the corrupted sets paste it, so it differs from x only inside M where m < 255")
VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("repasted", "repasted (the object on its own background)", _REPASTED),
    Variant("only-fg", "only-fg (object on black)", "m*x + (1-m)*black (0, 0, 0)"),
    Variant("only-bg-tiled", "only-bg, tiled", f"m*T + (1-m)*x; {_TILED}"),
    Variant("only-bg-black", "only-bg, black", "m*black + (1-m)*x"),
    Variant("only-bg-inpainted", "only-bg, inpainted", _INPAINTED),
    Variant("mixed-same", "mixed-same", f"m*x + (1-m)*D, {_DONOR}; {_TILED}; donor: another image of the "
            "same class, uniform (the image itself where its class has no other)", "same"),
    Variant("mixed-rand", "mixed-rand", f"m*x + (1-m)*D, {_DONOR}; {_TILED}; donor: a class other than the "
            "image's, uniform, then an image of it, uniform", "other"),
)}
"""The profile's variants in the order reports list them; ``repasted`` first: the paste control, which changes
only the compositing, so the profile can tell the paste's cost from the background's effect."""


def variant(name: str) -> Variant:
    """The variant called ``name``; an ``OptionError`` listing them otherwise."""
    if name not in VARIANTS:
        raise OptionError(f"unknown variant {name!r}", fix=f"use one of {', '.join(VARIANTS)}")
    return VARIANTS[name]


def render_variant(
    name: str,
    image: np.ndarray,
    mask: np.ndarray,
    donor_image: np.ndarray | None = None,
    donor_mask: np.ndarray | None = None,
) -> np.ndarray:
    """Variant ``name`` of ``image`` (H, W, 3) with its ``mask`` (H, W), both ``uint8`` at the evaluation
    crop; a mixed variant needs its donor's image and mask at the same size."""
    kind = variant(name)
    if kind.donor is not None:
        if donor_image is None or donor_mask is None:
            raise ValueError(f"the {name} variant needs a donor image and its mask")
        return composite_pixels(image, mask, without_object(donor_image, donor_mask, "tiled"))
    if name == "only-fg":
        return composite_pixels(image, mask, np.broadcast_to(np.uint8(ONLY_FG_FILL), image.shape))
    if name == "only-bg-inpainted":
        return background_only(image, mask, "inpainted")
    if name == "repasted":
        return composite_pixels(image, mask, background_only(image, mask, "inpainted"))
    return without_object(image, mask, "tiled" if name == "only-bg-tiled" else "black")


def background_only(image: np.ndarray, mask: np.ndarray, fill: str) -> np.ndarray:
    """The object of ``image`` (crop, crop, 3) removed with its mask dilated by :func:`dilation_radius`, so
    the soft edge's halo of object colour leaves with it, the hole filled with ``fill``: the
    ``only-bg-inpainted`` variant, and the leakage meter's background view with any fill."""
    return without_object(image, dilated_mask(mask, dilation_radius(image.shape[0])), fill)


def dilation_radius(crop: int) -> int:
    """Pixels :func:`background_only` dilates the object's mask by at a ``crop`` × ``crop`` image (at
    least 1)."""
    return max(1, round(DILATION * crop))


def without_object(image: np.ndarray, mask: np.ndarray, fill: str) -> np.ndarray:
    """``image`` with its object removed: ``m·F + (1 − m)·x``, ``F`` the tiled, inpainted or black
    background (:data:`FILLS`)."""
    if fill not in FILLS:
        raise OptionError(f"unknown fill {fill!r}", fix=f"use one of {', '.join(FILLS)}")
    if fill == "tiled":
        filler = tiled_background(image, mask)
    elif fill == "inpainted":
        filler = inpainted_background(image, mask)
    else:
        filler = np.zeros_like(image)
    return composite_pixels(filler, mask, image)


def dilated_mask(mask: np.ndarray, radius: int) -> np.ndarray:
    """The hard mask (0 or 255) of the pixels within ``radius`` pixels (a disc) of the object (mask ≥
    :data:`OBJECT_THRESHOLD`): removing it takes the soft edge's halo of object colour with the object, so
    no outline of it is left for a fill to extend."""
    hard = np.where(mask >= OBJECT_THRESHOLD, np.uint8(255), np.uint8(0))
    if radius <= 0:
        return hard

    disc = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1, 2 * radius + 1))
    return cv2.dilate(hard, disc)


def inpainted_background(image: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``image`` with the pixels of mask ≥ :data:`OBJECT_THRESHOLD` painted in from their surroundings by
    OpenCV's Telea inpainting (radius :data:`INPAINT_RADIUS`): unlike tiling it follows the background next to
    the hole, unlike black it leaves no silhouette. Without an object the image itself; where the object
    covers the frame there is nothing to paint from: black."""
    hole = np.where(mask >= OBJECT_THRESHOLD, np.uint8(255), np.uint8(0))
    if not hole.any():
        return image.copy()
    if hole.all():
        return np.zeros_like(image)

    return cv2.inpaint(np.ascontiguousarray(image), hole, INPAINT_RADIUS, cv2.INPAINT_TELEA)


def tiled_background(image: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The whole frame tiled with the largest strip of ``image`` outside its object's bounding box, the tiling
    anchored at the strip so it continues the strip's own pattern (Xiao et al.'s Only-BG-T). Without an
    object every pixel is background: the image itself. Where the box covers the frame, the background's
    mean colour (weights ``1 − m``), or black where the mask covers everything."""
    box = object_box(mask)
    height, width = mask.shape
    if box is None:
        return image.copy()
    strip = largest_strip(box, (height, width))
    if strip is None:
        weights = 1.0 - mask.astype(np.float64) / 255.0
        if weights.sum() == 0:
            return np.zeros_like(image)
        mean = (image * weights[..., None]).sum(axis=(0, 1)) / weights.sum()
        return np.broadcast_to(np.round(mean).astype(np.uint8), image.shape).copy()
    top, left, strip_h, strip_w = strip
    rows = top + (np.arange(height) - top) % strip_h
    columns = left + (np.arange(width) - left) % strip_w
    return image[np.ix_(rows, columns)]


def object_box(mask: np.ndarray) -> tuple[int, int, int, int] | None:
    """``(top, left, bottom, right)`` (bottom and right exclusive) of the pixels with mask ≥
    :data:`OBJECT_THRESHOLD`; None where there are none."""
    rows = np.flatnonzero((mask >= OBJECT_THRESHOLD).any(axis=1))
    columns = np.flatnonzero((mask >= OBJECT_THRESHOLD).any(axis=0))
    if len(rows) == 0:
        return None
    return int(rows[0]), int(columns[0]), int(rows[-1]) + 1, int(columns[-1]) + 1


def largest_strip(
    box: tuple[int, int, int, int], size: tuple[int, int]
) -> tuple[int, int, int, int] | None:
    """The largest of the four full-length strips of a ``(height, width)`` frame above, below, left and right
    of ``box``, as ``(top, left, height, width)``; the first of them in that order on a tie, None where the
    box covers the frame."""
    top, left, bottom, right = box
    height, width = size
    strips = [(0, 0, top, width), (bottom, 0, height - bottom, width), (0, 0, height, left),
              (0, right, height, width - right)]
    best = max(strips, key=lambda strip: strip[2] * strip[3])
    return best if best[2] * best[3] > 0 else None
