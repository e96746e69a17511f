"""The training geometry: shorter side resized, a random resized crop and a horizontal flip, applied to an
image and its mask together by one albumentations pipeline: the paper's code's ``Resize(256)``,
``RandomResizedCrop(227, scale=(0.16, 1), ratio=(3/4, 4/3))`` and flip (docs/design.md, *Geometry*), bilinear
with area averaging when shrinking, so the mask stays soft.

Each draw's seed feeds one generator shared by all transforms (``set_random_state``): albumentations' own
``Compose(seed=...)`` gives every transform a generator of the same seed, so in 2.0.8 the flip re-used the
crop's first random number (small crops mirrored ~88 % of the time). Tests check crop and flip independent.
"""

from __future__ import annotations

import os
import random
from typing import Any

# Before the import: albumentations otherwise asks PyPI for a newer version (and advises its AGPL successor).
os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

import albumentations
import cv2
import numpy as np

from bgbias.data.geometry import TrainGeometry
from bgbias.data.registry import dataset_class
from bgbias.errors import OptionError


def train_geometry(dataset_name: str) -> TrainGeometry:
    """The default training geometry of dataset ``dataset_name`` (its layout's ``train_geometry``)."""
    try:
        return dataset_class(dataset_name).train_geometry
    except OptionError as err:
        raise OptionError(
            f"no training geometry is defined for dataset {dataset_name!r}",
            fix=f"{err.fix}, or pass the geometry explicitly",
        ) from None


def make_train_transform(geometry: TrainGeometry) -> Any:
    """The albumentations ``Compose`` of ``geometry``, for an RGB image with an optional ``mask`` target.

    Only the resize area-averages: ``RandomResizedCrop(area_for_downscale="image_mask")`` in 2.0.8 also
    area-averages the mask when it enlarges, so the crop is plain bilinear (it shrinks by at most 256/227).
    """
    bilinear = {"interpolation": cv2.INTER_LINEAR, "mask_interpolation": cv2.INTER_LINEAR}
    steps = []
    if geometry.resize is not None:
        steps.append(
            albumentations.SmallestMaxSize(
                max_size=geometry.resize, area_for_downscale="image_mask", **bilinear
            )
        )
    steps += [
        albumentations.RandomResizedCrop(
            size=(geometry.crop, geometry.crop), scale=geometry.scale, ratio=geometry.ratio, **bilinear
        ),
        albumentations.HorizontalFlip(p=geometry.flip_p),
    ]
    return albumentations.Compose(steps)


def apply_train_transform(
    transform: Any, seed: int, image: np.ndarray, mask: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Run ``transform`` (from :func:`make_train_transform`) on ``image`` (H×W×3) and ``mask`` (H×W), both
    ``uint8``, with the random draws fixed by ``seed`` alone."""
    transform.set_random_state(np.random.default_rng(seed), random.Random(seed))
    if mask is None:
        return transform(image=image)["image"], None
    out = transform(image=image, mask=mask)
    return out["image"], out["mask"]
