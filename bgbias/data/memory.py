"""Images that are no file: the samples of a torch ``Dataset`` (or any sequence) a user hands to bgbias. An
:class:`InMemoryImage` stands where an image path stands and reads its sample when loaded (a million images
are never held twice); it pickles with its dataset into loader workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from bgbias.errors import ImageError


@dataclass(frozen=True, eq=False)
class InMemoryImage:
    """Field ``field`` of sample ``index`` of ``samples`` (``samples[index][field]``; ``samples[index]``
    itself for ``field`` None): a PIL image, a ``uint8`` array (H, W[, C]) or a tensor, (C, H, W)
    (``uint8``, or float in [0, 1]); values outside those ranges are refused, never clipped."""

    samples: Any
    index: int
    field: int | None
    name: str
    """How messages name it: ``dataset[12]`` or ``dataset[12] (mask)``."""

    def __str__(self) -> str:
        return self.name

    def open(self) -> Image.Image:
        """The sample as a PIL image (``ImageError`` naming it when it is none)."""
        try:
            sample = self.samples[self.index]
            value = sample if self.field is None else sample[self.field]
        except Exception as exc:  # whatever the user's dataset raises
            raise ImageError(f"reading it raised {type(exc).__name__}: {exc}", path=self.name,
                             fix="check the dataset's __getitem__ for this index") from exc
        return as_pil(value, self.name)


def as_pil(value: Any, name: str) -> Image.Image:
    """``value`` (PIL image, numpy array or torch tensor) as a PIL image; ``ImageError`` naming ``name``
    for anything else and for pixel values outside [0, 1] (floats) or 0..255 (integers), never clipped."""
    if isinstance(value, Image.Image):
        return value
    if hasattr(value, "detach"):  # a torch tensor: (C, H, W) or (H, W)
        tensor = value.detach().cpu()
        array = (tensor.float() if tensor.is_floating_point() else tensor).numpy()  # numpy has no bfloat16
        if array.ndim == 3:
            array = array.transpose(1, 2, 0)
    else:
        array = np.asarray(value)
    array = _eight_bit(array, type(value).__name__, name)
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] not in (3, 4)) or 0 in array.shape:
        raise ImageError(f"a sample of type {type(value).__name__} and shape {array.shape} is no image",
                         path=name, fix="give a PIL image, an (H, W, 3) uint8 array or a (3, H, W) tensor")
    return Image.fromarray(array)


def _eight_bit(array: np.ndarray, kind: str, name: str) -> np.ndarray:
    """``array`` as ``uint8``: floats in [0, 1] scaled by 255, integers in 0..255 as they are, booleans (a
    mask) as 0 and 255."""
    if array.dtype == np.uint8:
        return array
    if array.dtype == np.bool_:
        return array.astype(np.uint8) * 255
    if array.dtype.kind not in "fiu":
        raise ImageError(f"a sample of type {kind} and dtype {array.dtype} holds no pixel values", path=name,
                         fix="give a PIL image, an (H, W, 3) uint8 array or a (3, H, W) tensor")
    if array.size == 0:
        return array.astype(np.uint8)  # refused by the shape check, which says why
    floating = array.dtype.kind == "f"
    low, high = (0.0, 1.0) if floating else (0, 255)
    if floating and not np.isfinite(array).all():
        shown = "NaN or infinite values"
    elif array.min() < low or array.max() > high:
        shown = f"values from {array.min()} to {array.max()}"
    else:
        return np.round(array * 255).astype(np.uint8) if floating else array.astype(np.uint8)
    raise ImageError(
        f"a {kind} of {array.dtype} pixels holds {shown}, outside {low}..{high}", path=name,
        fix="give floats in [0, 1] (divide values of 0..255 by 255) or integers in 0..255 (scale 16-bit "
            "values down, e.g. >> 8)")
