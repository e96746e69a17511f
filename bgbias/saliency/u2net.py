"""U²-Net's input and output transforms exactly as rembg applies them to the u2net family (rembg 2.0.86:
``BaseSession.normalize`` and ``U2netSession.predict``), as two pure functions.

Split out of rembg's ``predict`` so that the pipeline can run them in worker threads on either side of the
network, and keep the raw output's range, which rembg discards by normalising every mask to 0–255. The
arithmetic (float64 normalisation, float32 min-max, truncation to uint8, LANCZOS both ways) mirrors rembg's
step for step, so the masks are bit-identical to ``rembg.remove(image, session=..., only_mask=True)``; a test
checks that on real photos with the real model.
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
    """A saliency mask at the image's size, and the range of the network output it was stretched from.

    ``raw_min``/``raw_max`` are ``None`` for models whose raw output the pipeline does not see.
    """

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
    """The 8-bit mask at ``size`` (width, height) from the network's first output ``(1, 1, 320, 320)``.

    The output is min-max normalised per image, so every mask spans 0–255 even when nothing is salient; the
    raw range kept in the result is what tells such masks apart. A constant output (no range at all), where
    rembg divides zero by zero and casts NaN, gives an all-zero mask.
    """
    prediction = raw[:, 0, :, :]
    low, high = np.min(prediction), np.max(prediction)
    if high > low:
        stretched = np.squeeze((prediction - low) / (high - low))
    else:
        stretched = np.zeros(prediction.shape[1:], dtype=prediction.dtype)
    small = Image.fromarray((stretched * 255).astype(np.uint8))
    return SoftMask(small.resize(size, Image.Resampling.LANCZOS), float(low), float(high))
