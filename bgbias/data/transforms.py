"""The evaluation geometry: shorter side resized to ``resize``, then a centred ``crop × crop`` square, on an
image and its mask alike. The mask is always resized bilinearly (antialiased, so it stays soft, as in the
paper's code), also where a model's preprocessing resizes the image bicubically (``ModelInput.from_timm``), so
every model's masks at one size are the same. Sizes and offsets follow torchvision's ``Resize(int)`` and
``CenterCrop`` (long side truncated, offset rounded): the crops of the paper's Resize(256)/CenterCrop(227).
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from bgbias.data.geometry import EvalGeometry
from bgbias.data.registry import dataset_class
from bgbias.errors import OptionError


def eval_geometry(dataset_name: str) -> EvalGeometry:
    """The default evaluation geometry of dataset ``dataset_name`` (its layout's ``eval_geometry``)."""
    try:
        return dataset_class(dataset_name).eval_geometry
    except OptionError as err:
        raise OptionError(
            f"no evaluation geometry is defined for dataset {dataset_name!r}",
            fix=f"{err.fix}, or pass the geometry explicitly",
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


RESAMPLING = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC}
"""PIL's filter for each of :data:`~bgbias.data.geometry.INTERPOLATIONS`."""


def eval_transform(image: Image.Image, geometry: EvalGeometry) -> np.ndarray:
    """Resize (with the geometry's interpolation) then centre-crop one RGB image: ``uint8`` of shape
    ``(crop, crop, 3)``."""
    return _resize_crop(image, geometry, RESAMPLING[geometry.interpolation])


def eval_transform_pair(
    image: Image.Image, mask: Image.Image, geometry: EvalGeometry
) -> tuple[np.ndarray, np.ndarray]:
    """The same geometry on an RGB image and its ``L`` mask, which must be of one size; the mask is resized
    bilinearly whatever the image's interpolation, so it stays soft, and a ``(crop, crop)`` array."""
    if image.size != mask.size:
        raise ValueError(f"image size {image.size} and mask size {mask.size} differ")
    return eval_transform(image, geometry), eval_transform_mask(mask, geometry)


def eval_transform_mask(mask: Image.Image, geometry: EvalGeometry) -> np.ndarray:
    """An ``L`` mask at the evaluation geometry, resized bilinearly (it stays soft): a ``(crop, crop)``
    array, as :func:`eval_transform_pair` gives it."""
    return _resize_crop(mask, geometry, Image.Resampling.BILINEAR)


def _resize_crop(image: Image.Image, geometry: EvalGeometry, resample: Image.Resampling) -> np.ndarray:
    resized = image.resize(resized_size(image.size, geometry.resize), resample)
    cropped = resized.crop(center_crop_box(resized.size, geometry.crop))
    return np.array(cropped, dtype=np.uint8)
