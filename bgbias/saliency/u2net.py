"""U²-Net's input and output transforms exactly as rembg 2.0.86 applies them to the u2net family
(``BaseSession.normalize``, ``U2netSession.predict``), split so the pipeline runs them on worker threads and
keeps the raw output's range. The arithmetic mirrors rembg's step for step: masks are bit-identical to
``rembg.remove(..., only_mask=True)`` (a test checks it with the real model).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image

INPUT_SIZE = (320, 320)
"""Width and height of the network input: both U²-Net ONNX graphs take a fixed ``[1, 3, 320, 320]``."""

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406])
IMAGENET_STD = np.array([0.229, 0.224, 0.225])


@dataclass(frozen=True)
class SoftMask:
    """A saliency mask at the image's size and the raw output range it was stretched from (``None`` for
    models whose raw output the pipeline does not see)."""

    image: Image.Image
    raw_min: float | None
    raw_max: float | None


def u2net_input(image: Image.Image) -> np.ndarray:
    """The ``(1, 3, 320, 320)`` float32 network input for ``image``: LANCZOS to 320², divided by the image
    maximum, ImageNet mean and standard deviation, channels first."""
    pixels = np.asarray(image.convert("RGB").resize(INPUT_SIZE, Image.Resampling.LANCZOS))
    scaled = pixels / max(np.max(pixels), 1e-6)
    normalised = (scaled - IMAGENET_MEAN) / IMAGENET_STD
    return np.expand_dims(normalised.transpose((2, 0, 1)), 0).astype(np.float32)


def u2net_mask(raw: np.ndarray, size: tuple[int, int]) -> SoftMask:
    """The 8-bit mask at ``size`` (width, height) from the network's first output ``(1, 1, 320, 320)``,
    min-max normalised per image (the kept raw range tells empty masks apart). A constant output, where rembg
    casts 0/0, gives an all-zero mask."""
    prediction = raw[:, 0, :, :]
    low, high = np.min(prediction), np.max(prediction)
    if high > low:
        stretched = np.squeeze((prediction - low) / (high - low))
    else:
        stretched = np.zeros(prediction.shape[1:], dtype=prediction.dtype)
    small = Image.fromarray((stretched * 255).astype(np.uint8))
    return SoftMask(small.resize(size, Image.Resampling.LANCZOS), float(low), float(high))
