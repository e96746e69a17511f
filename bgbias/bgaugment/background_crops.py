"""Background crops: which pool image, which box of it and whether to mirror it, sampled apart from applying.

A :class:`BackgroundCrop` is plain numbers that a manifest records and a renderer replays, drawn from any
:class:`Draws`. The rules are the paper's code's: background uniform with replacement, torchvision's
``RandomResizedCrop.get_params`` box (scale 0.16–1, ratio 3/4–4/3), flip with p = 0.5. The box is drawn on
the background's own size rather than a 256-px resize: the same relative crop, resampled once, not twice.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from PIL import Image

SCALE = (0.16, 1.0)
RATIO = (3 / 4, 4 / 3)
FLIP_P = 0.5
_ATTEMPTS = 10


class Draws(Protocol):
    """The draws the crop rules make, with numpy's names: a ``numpy.random.Generator`` is one."""

    def random(self) -> float: ...

    def uniform(self, low: float, high: float) -> float: ...

    def integers(self, low: int, high: int) -> int: ...


@dataclass(frozen=True)
class CropBox:
    """A pixel rectangle of a background: ``left``/``top`` offsets, ``width``/``height`` extents."""

    left: int
    top: int
    width: int
    height: int

    def as_list(self) -> list[int]:
        return [self.left, self.top, self.width, self.height]

    def pil_box(self) -> tuple[int, int, int, int]:
        return self.left, self.top, self.left + self.width, self.top + self.height

    def fits(self, size: tuple[int, int]) -> bool:
        """Whether the box lies inside an image of ``(width, height)``."""
        return (
            self.left >= 0
            and self.top >= 0
            and self.width > 0
            and self.height > 0
            and self.left + self.width <= size[0]
            and self.top + self.height <= size[1]
        )


@dataclass(frozen=True)
class BackgroundCrop:
    """One sampled background: index into the pool, the box cut from it, and whether it is mirrored."""

    background: int
    box: CropBox
    flip: bool


def image_rng(seed: int, repeat: int, *names: str) -> np.random.Generator:
    """A generator owned by one image of one repeat (``names``: its id, after a variant's name where a variant
    draws). The image enters by a hash of its id, not its position, so adding or reordering images leaves the
    draws of the others unchanged."""
    if seed < 0 or repeat < 0:
        raise ValueError(f"seed ({seed}) and repeat ({repeat}) must be non-negative")
    keys = [int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big") for name in names]
    return np.random.default_rng(np.random.SeedSequence([seed, repeat, *keys]))


def random_resized_box(
    rng: Draws,
    size: tuple[int, int],
    scale: tuple[float, float] = SCALE,
    ratio: tuple[float, float] = RATIO,
) -> CropBox:
    """A box covering ``scale`` of the area of an image of ``size``, width/height log-uniform in ``ratio``."""
    width, height = size
    area = width * height
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(_ATTEMPTS):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        w = round(math.sqrt(target_area * aspect))
        h = round(math.sqrt(target_area / aspect))
        if 0 < w <= width and 0 < h <= height:
            left = int(rng.integers(0, width - w + 1))
            top = int(rng.integers(0, height - h + 1))
            return CropBox(left, top, w, h)
    # Very elongated images rarely admit a box: take the largest centred one whose ratio is in range.
    in_ratio = width / height
    if in_ratio < ratio[0]:
        w, h = width, round(width / ratio[0])
    elif in_ratio > ratio[1]:
        w, h = round(height * ratio[1]), height
    else:
        w, h = width, height
    return CropBox((width - w) // 2, (height - h) // 2, w, h)


def sample_background_crop(
    rng: Draws,
    background_sizes: Sequence[tuple[int, int]],
    scale: tuple[float, float] = SCALE,
    ratio: tuple[float, float] = RATIO,
    flip_p: float = FLIP_P,
) -> BackgroundCrop:
    """Draw a background uniformly from a pool (given by its images' sizes), a box of it and a flip."""
    if not background_sizes:
        raise ValueError("the background pool is empty")
    index = int(rng.integers(0, len(background_sizes)))
    box = random_resized_box(rng, background_sizes[index], scale, ratio)
    flip = bool(rng.random() < flip_p)
    return BackgroundCrop(index, box, flip)


def apply_crop(background: Image.Image, box: CropBox, flip: bool, size: int) -> np.ndarray:
    """Cut ``box`` from an RGB background, resize it bilinearly to ``size × size`` and mirror it if ``flip``:
    ``uint8`` ``(size, size, 3)``."""
    if not box.fits(background.size):
        raise ValueError(f"crop box {box.as_list()} does not fit in a background of size {background.size}")
    crop = background.resize((size, size), Image.Resampling.BILINEAR, box=box.pil_box())
    if flip:
        crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.array(crop, dtype=np.uint8)
