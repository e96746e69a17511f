"""The evaluation geometry: shorter side resized to ``resize``, then a centred ``crop × crop`` square.

It is applied identically to an image and its mask, so a mask pixel stays on its image pixel. Both are resized
bilinearly (PIL, antialiased when shrinking, as torchvision's ``Resize`` does on PIL images): the mask stays
soft, as in the paper's code. Sizes and offsets follow torchvision's ``Resize(int)`` and ``CenterCrop`` rules
(long side truncated, offset rounded), so crops land on the pixels of the paper's code's
Resize(256)/CenterCrop(227).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image

from bgbias.errors import OptionError


@dataclass(frozen=True)
class EvalGeometry:
    """Shorter side after resizing, and side of the centred square crop taken from it."""

    resize: int
    crop: int

    def __post_init__(self) -> None:
        if not (0 < self.crop <= self.resize):
            raise OptionError(
                f"evaluation geometry resize={self.resize}, crop={self.crop} is impossible",
                fix="choose 0 < crop <= resize (the crop is cut from the resized image)",
            )

    def as_dict(self) -> dict[str, int]:
        return {"resize": self.resize, "crop": self.crop}


# The paper's code's Resize(256) → CenterCrop(227) for the real benchmarks. The bench's views are 128 × 128
# px already: up-sampling them to 227 adds no information and makes every forward pass about 3× dearer (160 px
# was twice as slow as 128 px: docs/bench-dataset.md, *Cost*), so the bench is evaluated at its native size.
EVAL_GEOMETRY: dict[str, EvalGeometry] = {
    "cub": EvalGeometry(resize=256, crop=227),
    "cars": EvalGeometry(resize=256, crop=227),
    "sop": EvalGeometry(resize=256, crop=227),
    "folder": EvalGeometry(resize=256, crop=227),
    "bench": EvalGeometry(resize=128, crop=128),
}


def eval_geometry(dataset_name: str) -> EvalGeometry:
    """The default evaluation geometry of a dataset kind (cub, cars, sop, folder, bench)."""
    try:
        return EVAL_GEOMETRY[dataset_name]
    except KeyError:
        raise OptionError(
            f"no evaluation geometry is defined for dataset {dataset_name!r}",
            fix=f"use one of {', '.join(sorted(EVAL_GEOMETRY))}, or pass the geometry explicitly",
        ) from None


def resized_size(size: tuple[int, int], shorter: int) -> tuple[int, int]:
    """``(width, height)`` after scaling the shorter side of ``size`` to ``shorter`` (long side truncated)."""
    width, height = size
    if width <= height:
        return shorter, int(shorter * height / width)
    return int(shorter * width / height), shorter


def center_crop_box(size: tuple[int, int], crop: int) -> tuple[int, int, int, int]:
    """PIL box ``(left, top, right, bottom)`` of the centred ``crop × crop`` square of an image of ``size``.

    Offsets are rounded half to even, as Python's ``round`` (and so torchvision) does: 256 → 227 starts at 14.
    """
    width, height = size
    left = round((width - crop) / 2)
    top = round((height - crop) / 2)
    return left, top, left + crop, top + crop


def eval_transform(image: Image.Image, geometry: EvalGeometry) -> np.ndarray:
    """Resize then centre-crop one image or mask.

    Returns ``uint8`` of shape ``(crop, crop, 3)`` for an RGB image, ``(crop, crop)`` for an ``L`` mask.
    """
    resized = image.resize(resized_size(image.size, geometry.resize), Image.Resampling.BILINEAR)
    cropped = resized.crop(center_crop_box(resized.size, geometry.crop))
    return np.array(cropped, dtype=np.uint8)


def eval_transform_pair(
    image: Image.Image, mask: Image.Image, geometry: EvalGeometry
) -> tuple[np.ndarray, np.ndarray]:
    """The same geometry on an RGB image and its ``L`` mask, which must be of one size."""
    if image.size != mask.size:
        raise ValueError(f"image size {image.size} and mask size {mask.size} differ")
    return eval_transform(image, geometry), eval_transform(mask, geometry)
