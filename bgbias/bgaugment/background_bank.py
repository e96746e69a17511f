"""A background pool decoded once and held on the training device, cut into crops there for a whole batch.

Crops are resized with torch's antialiased bilinear ``interpolate``, as PIL's bilinear resize does for the
fixed corrupted sets, so training backgrounds look like theirs. The loop runs over crops, never pixels: on one
CPU thread 32 crops took ~11 ms, a batched gather ~360 ms and ``grid_sample`` ~125 ms. On CPU the resize runs
on ``uint8`` (the vectorised kernel wants channels-last); CUDA has no ``uint8`` resize and resizes float.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from bgbias.backgrounds.pool import list_pool, pool_folder
from bgbias.bgaugment.background_crops import BackgroundCrop
from bgbias.data.images import load_image
from bgbias.data.transforms import resized_size
from bgbias.errors import OptionError

if TYPE_CHECKING:
    import os


TRAIN_SHORTER_SIDE = 256
"""The shorter side training backgrounds are kept at (the paper's code resizes them to 256, then crops)."""


class BackgroundBank:
    """``pixels``: ``uint8`` (N, 3, Hmax, Wmax), channels-last, background ``i`` in its top-left ``sizes[i]``
    (width, height) corner; ``names``: the file name of each, for reports."""

    def __init__(self, pixels: torch.Tensor, sizes: Sequence[tuple[int, int]], names: Sequence[str]):
        if pixels.dtype != torch.uint8 or pixels.dim() != 4 or pixels.shape[1] != 3:
            raise ValueError(f"pixels must be uint8 (N, 3, H, W), got {pixels.dtype} {tuple(pixels.shape)}")
        if not len(sizes) == len(names) == pixels.shape[0] > 0:
            raise ValueError(f"{pixels.shape[0]} backgrounds, {len(sizes)} sizes and {len(names)} names")
        height, width = pixels.shape[2:]
        if any(not (0 < w <= width and 0 < h <= height) for w, h in sizes):
            raise ValueError(f"a size in {list(sizes)} does not fit the padded {width}×{height}")
        self.pixels = pixels.contiguous(memory_format=torch.channels_last)
        self.sizes = [(int(w), int(h)) for w, h in sizes]
        self.names = list(names)

    @classmethod
    def from_folder(
        cls, folder: Path, device: torch.device | str, shorter_side: int | None = None
    ) -> BackgroundBank:
        """Decode the pool ``folder`` onto ``device``, shorter sides resized to ``shorter_side`` if given."""
        if shorter_side is not None and shorter_side < 1:
            raise OptionError(
                f"the background size (shorter side) must be positive, got {shorter_side}",
                fix="pass a positive size, or none to keep the pool's own sizes",
            )
        paths = list_pool(folder)
        images = [load_image(path) for path in paths]
        if shorter_side is not None:
            images = [image.resize(resized_size(image.size, shorter_side), Image.Resampling.BILINEAR)
                      for image in images]
        height, width = max(image.height for image in images), max(image.width for image in images)
        pixels = np.zeros((len(images), 3, height, width), dtype=np.uint8)  # each zero-padded
        for index, image in enumerate(images):
            pixels[index, :, : image.height, : image.width] = np.asarray(image).transpose(2, 0, 1)
        sizes = [image.size for image in images]
        return cls(torch.from_numpy(pixels).to(device), sizes, [path.name for path in paths])

    @property
    def device(self) -> torch.device:
        return self.pixels.device

    def to(self, device: torch.device | str) -> BackgroundBank:
        if torch.device(device) == self.device:
            return self
        return BackgroundBank(self.pixels.to(device), self.sizes, self.names)

    def __len__(self) -> int:
        return len(self.sizes)

    def render(
        self, crops: Sequence[BackgroundCrop], size: int, dtype: torch.dtype | None = None
    ) -> torch.Tensor:
        """The crops as ``(n, 3, size, size)`` in [0, 1] on the bank's device (:func:`render_crops`)."""
        dtype = torch.float32 if dtype is None else dtype
        if size < 1:
            raise ValueError(f"render size must be positive, got {size}")
        for crop in crops:
            if not 0 <= crop.background < len(self) or not crop.box.fits(self.sizes[crop.background]):
                raise ValueError(f"crop {crop} does not fit the bank's backgrounds")
        rendered = render_crops(self.pixels, crops, size, uint8_kernel=self.device.type == "cpu")
        return rendered.div_(255).to(dtype)


def train_bank(backgrounds: str | os.PathLike[str], device: torch.device | str) -> BackgroundBank:
    """The training pool of ``backgrounds`` (its ``train/``, else the folder), as BGAugment draws from it."""
    return BackgroundBank.from_folder(pool_folder(backgrounds, "train"), device, TRAIN_SHORTER_SIDE)


def render_crops(
    pixels: torch.Tensor, crops: Sequence[BackgroundCrop], size: int, *, uint8_kernel: bool
) -> torch.Tensor:
    """Renders (float32, 0–255) of ``crops`` from the ``uint8`` pool ``pixels``, resized (antialiased
    bilinear) and mirrored where ``flip``; ``uint8_kernel`` resizes ``uint8`` directly (rounded like PIL)."""
    out = torch.empty((len(crops), 3, size, size), dtype=torch.float32, device=pixels.device)
    for i, crop in enumerate(crops):
        box = crop.box
        region = pixels[crop.background : crop.background + 1, :, box.top : box.top + box.height,
                        box.left : box.left + box.width].contiguous(memory_format=torch.channels_last)
        if not uint8_kernel:
            region = region.float()
        resized = F.interpolate(region, size=(size, size), mode="bilinear", align_corners=False,
                                antialias=True)
        out[i] = resized[0].flip(-1) if crop.flip else resized[0]
    return out
