"""Whether a picture was cut at its sides: a title or legend that runs past a figure's edge leaves ink in its
outermost columns, where a whole figure has its white margin."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image


def edge_ink(png: bytes) -> tuple[int, int]:
    """The pixels that are not white in a picture's leftmost and rightmost columns: where a title or legend
    cut by the edge shows."""
    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    inked = pixels.min(axis=2) < 245
    return int(inked[:, 0].sum()), int(inked[:, -1].sum())
