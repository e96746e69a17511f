"""BGAugment: each training image (with probability ``p``) gets a fresh random background behind its mask.

Sampling draws a few numbers on the CPU from a ``torch.Generator``; applying renders the crops from a
:class:`BackgroundBank` on the device and composites them. The halves are public (:meth:`BGAugment.sample`,
:meth:`BGAugment.apply`), so a caller can record, replay or share a batch's draws. The training engine and
anyone's own training loop call the same :class:`BGAugment`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import torch
from pydantic import Field

from bgbias.bgaugment.background_bank import BackgroundBank, train_bank
from bgbias.bgaugment.background_crops import BackgroundCrop, sample_background_crop
from bgbias.bgaugment.composite import composite
from bgbias.bgaugment.generators import TorchDraws, check_generator, keyed_generator
from bgbias.errors import OptionError
from bgbias.options import BATCH_SIZE, INTEGER, NUMBER, PATH_TEXT, Must, checked


@dataclass(frozen=True)
class BGAugmentParams:
    """One batch's draws, plain data on the CPU: a background crop for every image, and whether it is used."""

    crops: list[BackgroundCrop]
    apply: list[bool]


def check_probability(p: float) -> None:
    if not 0 <= p <= 1:
        raise OptionError(
            f"p={p!r} is invalid: the BGAugment probability must lie in [0, 1]",
            fix="pass p=1.0 (every image, as in the paper) or any probability down to p=0.0 (never)",
        )


def sample_bgaugment(
    bank_sizes: Sequence[tuple[int, int]], n: int, p: float, generator: torch.Generator
) -> BGAugmentParams:
    """Draw a crop for each of ``n`` images (also those left unchanged, so batches keep one shape), then which
    images get it, each with probability ``p``, from the CPU ``generator``."""
    check_probability(p)
    check_generator(generator)
    draws = TorchDraws(generator)
    crops = [sample_background_crop(draws, bank_sizes) for _ in range(n)]
    apply = (torch.rand(n, dtype=torch.float64, generator=generator) < p).tolist()
    return BGAugmentParams(crops, apply)


def apply_bgaugment(
    images: torch.Tensor, masks: torch.Tensor, backgrounds: torch.Tensor, apply: torch.Tensor
) -> torch.Tensor:
    """``composite(images, masks, backgrounds)`` where ``apply`` (bool, (B,)), else ``images``."""
    if apply.dtype != torch.bool or apply.shape != images.shape[:1] or apply.device != images.device:
        raise ValueError(
            f"apply must be a bool tensor of shape ({images.shape[0]},) on {images.device}, got "
            f"{apply.dtype} {tuple(apply.shape)} on {apply.device}"
        )
    return torch.where(apply[:, None, None, None], composite(images, masks, backgrounds), images)


class BGAugment(torch.nn.Module):
    """BGAugment as a module: images and masks in (``uint8`` or float in [0, 1], a batch or one image), the
    composited float images in [0, 1] out, on the images' device; ``backgrounds`` is a bank or a background
    folder (:func:`~bgbias.bgaugment.background_bank.train_bank`). Usage: docs/api.md.

    Draws come from a call's ``generator``, else the module's own (``generator=`` or ``seed``, default 0).
    In a DataLoader worker the module's own is first re-keyed by the worker's seed: every worker starts from
    a copy of one generator and would otherwise draw what the others draw.
    """

    background_pixels: torch.Tensor

    @checked(backgrounds=Annotated[BackgroundBank | PATH_TEXT, Field(examples=["backgrounds"])],
             p=Annotated[NUMBER, Field(ge=0, le=1, examples=[1.0]), Must("a probability in [0, 1]")],
             seed=Annotated[Annotated[INTEGER, Field(ge=0)] | None, Field(examples=[0])])
    def __init__(
        self,
        backgrounds: BackgroundBank | str | os.PathLike[str],
        p: float = 1.0,
        seed: int | None = None,
        *,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        if generator is not None:
            check_generator(generator)
            if seed is not None:
                raise OptionError(f"seed={seed!r} and generator= were both given: BGAugment draws from one",
                                  fix="pass seed= alone (a generator seeded by it) or generator= alone")
        bank = backgrounds if isinstance(backgrounds, BackgroundBank) else train_bank(backgrounds, "cpu")
        self.register_buffer("background_pixels", bank.pixels, persistent=False)
        self.sizes = bank.sizes
        self.names = bank.names
        self.p = p
        self.generator = generator if generator is not None else torch.Generator().manual_seed(seed or 0)
        self._worker: tuple[int, int] | None = None  # the DataLoader worker (id, seed) it was re-keyed for

    @property
    def bank(self) -> BackgroundBank:
        return BackgroundBank(self.background_pixels, self.sizes, self.names)

    def extra_repr(self) -> str:
        return f"p={self.p}, backgrounds={len(self.sizes)}"

    @checked(batch_size=BATCH_SIZE)
    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> BGAugmentParams:
        """The draws of a batch of ``batch_size`` images (see the class for the generator)."""
        return sample_bgaugment(self.sizes, batch_size, self.p, self._generator(generator))

    def apply(self, images: torch.Tensor, masks: torch.Tensor, params: BGAugmentParams) -> torch.Tensor:
        """Composite ``images`` with the backgrounds ``params`` drew for them (one draw per image)."""
        batch, mask_batch, single = as_batch(images, masks)
        if len(params.crops) != batch.shape[0] or len(params.apply) != batch.shape[0]:
            raise ValueError(
                f"params= holds draws for {len(params.crops)} images, images= has {batch.shape[0]}: "
                f"draw them with sample({batch.shape[0]})"
            )
        if self.background_pixels.device != batch.device:
            self.to(batch.device)
        batch = _unit_float(batch)
        if any(params.apply):
            backgrounds = self.bank.render(params.crops, batch.shape[-1], batch.dtype)
            apply = torch.tensor(params.apply, dtype=torch.bool).to(batch.device, non_blocking=True)
            batch = apply_bgaugment(batch, _unit_float(mask_batch), backgrounds, apply)
        return batch[0] if single else batch

    def forward(
        self, images: torch.Tensor, masks: torch.Tensor, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """:meth:`apply` of fresh draws (:meth:`sample`, from ``generator`` or the module's own)."""
        batch, _, _ = as_batch(images, masks)
        return self.apply(images, masks, self.sample(batch.shape[0], generator))

    def _generator(self, generator: torch.Generator | None) -> torch.Generator:
        if generator is not None:
            check_generator(generator)
            return generator
        worker = torch.utils.data.get_worker_info()
        if worker is not None and self._worker != (worker.id, worker.seed):
            base = int(torch.randint(0, 2**62, (), generator=self.generator))
            self.generator = keyed_generator([base, worker.seed])
            self._worker = (worker.id, worker.seed)
        return self.generator


def as_batch(images: torch.Tensor, masks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """Checked images and masks as a batch, and whether they were one image."""
    single = images.dim() == 3
    batch_images, batch_masks = (images[None], masks[None]) if single else (images, masks)
    batch = batch_images.shape[0] if batch_images.dim() == 4 else -1
    side = images.shape[-1]
    kinds_ok = all(t.dtype == torch.uint8 or t.is_floating_point() for t in (images, masks))
    if (not kinds_ok or batch_images.shape != (batch, 3, side, side)
            or batch_masks.shape != (batch, 1, side, side)):
        raise ValueError(
            "BGAugment needs images= (B, 3, S, S) and masks= (B, 1, S, S), or one image (3, S, S) and its "
            f"mask (1, S, S), uint8 or float in [0, 1], got {images.dtype} {tuple(images.shape)} and "
            f"{masks.dtype} {tuple(masks.shape)}"
        )
    if images.device != masks.device:
        raise ValueError(f"images= ({images.device}) and masks= ({masks.device}) must be on one device")
    return batch_images, batch_masks, single


def _unit_float(pixels: torch.Tensor) -> torch.Tensor:
    return pixels if pixels.is_floating_point() else pixels.float().div_(255)
