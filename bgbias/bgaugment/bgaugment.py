"""BGAugment: each training image (with probability ``p``) gets a fresh random background behind its mask.

Sampling (which background, which box, which flip, applied or not) is a few numbers drawn on the CPU from the
caller's generator; applying renders the crops from a :class:`BackgroundBank` on the device and blends them
with the one :func:`~bgbias.bgaugment.composite.composite`, after the paired geometry the workers already gave
image and mask. The paper's code applied it to every sample (p = 1, the default) with its validation pool.
The training engine and anyone's own training loop call the same :class:`BGAugment`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bgbias.bgaugment.background_bank import BackgroundBank
from bgbias.bgaugment.background_crops import BackgroundCrop, sample_background_crop
from bgbias.bgaugment.composite import composite
from bgbias.errors import OptionError
from bgbias.options import SEED, Rule, check_arguments

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class BGAugmentParams:
    """One batch's draws: a background crop for every image, and whether it is used."""

    crops: list[BackgroundCrop]
    apply: list[bool]


def check_probability(p: float) -> None:
    if not 0 <= p <= 1:
        raise OptionError(
            f"the BGAugment probability must lie in [0, 1], got {p}",
            fix="pass a probability between 0 (never) and 1 (every image, as in the paper)",
        )


def sample_bgaugment(
    bank_sizes: Sequence[tuple[int, int]], n: int, p: float, rng: np.random.Generator
) -> BGAugmentParams:
    """Draw a crop for each of ``n`` images (also those left unchanged, so batches keep one shape), then which
    images get it, each with probability ``p``."""
    check_probability(p)
    crops = [sample_background_crop(rng, bank_sizes) for _ in range(n)]
    apply = (rng.random(n) < p).tolist()
    return BGAugmentParams(crops, apply)


def apply_bgaugment(
    images: torch.Tensor, masks: torch.Tensor, backgrounds: torch.Tensor, apply: torch.Tensor
) -> torch.Tensor:
    """``composite(images, masks, backgrounds)`` where ``apply`` (bool, (B,)) is true, ``images`` elsewhere.

    ``images`` and ``backgrounds`` are float (B, 3, H, W) in [0, 1], ``masks`` float (B, 1, H, W) in [0, 1].
    """
    import torch

    if apply.dtype != torch.bool or apply.shape != images.shape[:1] or apply.device != images.device:
        raise ValueError(
            f"apply must be a bool tensor of shape ({images.shape[0]},) on {images.device}, got "
            f"{apply.dtype} {tuple(apply.shape)} on {apply.device}"
        )
    return torch.where(apply[:, None, None, None], composite(images, masks, backgrounds), images)


ARGUMENTS = {"backgrounds": Rule(Path, example="backgrounds"),
             "p": Rule(float, example=1.0), "seed": SEED}
"""What :class:`BGAugment` takes (a background folder unless it is given a :class:`BackgroundBank`; the
range of ``p`` is :func:`check_probability`'s, shared with the configuration)."""


class BGAugment:
    """BGAugment as one call: a batch of images and their masks in, the composited float batch in [0, 1]
    out, on the images' device.

    ``backgrounds`` is a :class:`BackgroundBank` or a background folder (its ``train/`` pool, or the folder
    itself when it has none; :func:`~bgbias.bgaugment.background_bank.train_bank`). Images are ``uint8``
    (0–255) or float in [0, 1], (B, 3, S, S); masks likewise, (B, 1, S, S). Each call draws from ``rng`` when
    given (the training engine passes one keyed by seed, epoch and step, so a resumed run repeats its draws),
    else from the instance's own generator seeded by ``seed``: in anyone's training loop, the same seed and
    the same batches give the same composites.
    """

    def __init__(self, backgrounds: BackgroundBank | str | os.PathLike[str], p: float = 1.0, seed: int = 0):
        from bgbias.bgaugment.background_bank import train_bank

        folder = {} if isinstance(backgrounds, BackgroundBank) else {"backgrounds": backgrounds}
        check_arguments({**folder, "p": p, "seed": seed}, ARGUMENTS)
        check_probability(p)
        self.bank = backgrounds if isinstance(backgrounds, BackgroundBank) else train_bank(backgrounds, "cpu")
        self.p = p
        self.rng = np.random.default_rng(seed)

    def __call__(
        self, images: torch.Tensor, masks: torch.Tensor, rng: np.random.Generator | None = None
    ) -> torch.Tensor:
        import torch

        check_batch(images, masks)
        self.bank = self.bank.to(images.device)
        images = _unit_float(images)
        params = sample_bgaugment(self.bank.sizes, images.shape[0], self.p, rng or self.rng)
        if not any(params.apply):
            return images
        backgrounds = self.bank.render(params.crops, images.shape[-1], images.dtype)
        apply = torch.tensor(params.apply, dtype=torch.bool).to(images.device, non_blocking=True)
        return apply_bgaugment(images, _unit_float(masks), backgrounds, apply)


def check_batch(images: torch.Tensor, masks: torch.Tensor) -> None:
    """Images (B, 3, S, S) and masks (B, 1, S, S), each ``uint8`` or float, on one device."""
    import torch

    batch = images.shape[0] if images.dim() == 4 else -1
    side = images.shape[-1]
    kinds_ok = all(t.dtype == torch.uint8 or t.is_floating_point() for t in (images, masks))
    if not kinds_ok or images.shape != (batch, 3, side, side) or masks.shape != (batch, 1, side, side):
        raise ValueError(
            "BGAugment needs images (B, 3, S, S) and masks (B, 1, S, S), uint8 or float in [0, 1], got "
            f"{images.dtype} {tuple(images.shape)} and {masks.dtype} {tuple(masks.shape)}"
        )
    if images.device != masks.device:
        raise ValueError(f"images ({images.device}) and masks ({masks.device}) must be on one device")


def _unit_float(pixels: torch.Tensor) -> torch.Tensor:
    """``uint8`` pixels as float in [0, 1]; float pixels as they are."""
    return pixels if pixels.is_floating_point() else pixels.float().div_(255)
