"""Deterministic crops of source photographs: a crop box sampled from an rng (a manifest records it), then cut
and resized, so the crop can be redone from the source file alone.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image

Box = tuple[int, int, int, int]
"""(left, top, right, bottom) in source pixels, as PIL uses it."""

POOL_ASPECTS: tuple[float, ...] = (4 / 3, 3 / 2, 16 / 9, 1.0, 3 / 4, 2 / 3)
"""Width / height ratios of pool images: mostly landscape, some square and portrait, like photo albums."""


def sample_aspect(rng: np.random.Generator, aspects: tuple[float, ...] = POOL_ASPECTS) -> float:
    return float(aspects[int(rng.integers(len(aspects)))])


def output_size(aspect: float, long_side: int) -> tuple[int, int]:
    """(width, height) of an image with the given width/height ratio and long side."""
    if aspect >= 1:
        return long_side, max(1, round(long_side / aspect))
    return max(1, round(long_side * aspect)), long_side


def sample_crop_box(rng: np.random.Generator, source_size: tuple[int, int], aspect: float,
                    area: tuple[float, float] = (0.15, 0.6)) -> Box:
    """A box of width/height ratio ``aspect`` covering a random fraction ``area`` of the source, shrunk to fit
    where it would not (a portrait box on a panorama)."""
    width, height = source_size
    fraction = rng.uniform(*area)
    box_w = math.sqrt(fraction * width * height * aspect)
    box_h = box_w / aspect
    shrink = min(1.0, width / box_w, height / box_h)
    box_w, box_h = max(1, math.floor(box_w * shrink)), max(1, math.floor(box_h * shrink))
    left = int(rng.integers(0, width - box_w + 1))
    top = int(rng.integers(0, height - box_h + 1))
    return left, top, left + box_w, top + box_h


def crop_resized(image: Image.Image, box: Box, size: tuple[int, int]) -> Image.Image:
    """Cut ``box`` out of ``image`` and resize it to ``size`` (width, height) in one Lanczos pass."""
    return image.resize(size, Image.Resampling.LANCZOS, box=box)
