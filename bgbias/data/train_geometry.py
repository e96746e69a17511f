"""The training geometry: shorter side resized, a random resized crop and a horizontal flip, applied to an
image and its mask together by one albumentations pipeline.

These are the paper's code's training transforms (docs/design.md, *Geometry*): ``Resize(256)`` then
``RandomResizedCrop(227, scale=(0.16, 1), ratio=(3/4, 4/3))`` and a flip with p = 0.5. Image and mask are
resampled bilinearly, with area averaging when the resize shrinks (as PIL's antialiased resize in the paper's
code and in our evaluation geometry): the mask stays soft, never thresholded.

Randomness comes from one seed per draw (see ``bgbias.data.samplers``). It is fed to the pipeline with
``set_random_state``, one generator shared by all its transforms. albumentations' own ``Compose(seed=...)`` /
``set_random_seed`` gives every transform a generator of the same seed, so the flip re-uses the crop's first
random number: in albumentations 2.0.8 small crops come out mirrored ~88 % of the time and large crops almost
never. Tests check that crop size and flip are independent here.
"""

from __future__ import annotations

import os
import random
from typing import Any

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


def import_albumentations() -> Any:
    """albumentations without its import-time request to PyPI (a network call, a warning when offline, and
    advice to upgrade to the AGPL successor)."""
    os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

    return albumentations


def make_train_transform(geometry: TrainGeometry) -> Any:
    """The albumentations ``Compose`` of ``geometry``, for an RGB image with an optional ``mask`` target.

    Area averaging is used only by the shorter-side resize, where albumentations applies one rule to image and
    mask. ``RandomResizedCrop(area_for_downscale="image_mask")`` in 2.0.8 area-averages the mask also when
    it enlarges the crop, so the mask would come out sharper than its image; the crop is therefore plain
    bilinear for both (it shrinks by at most 256/227 after the resize, too little to alias).
    """
    albumentations = import_albumentations()
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
