"""A dataset split as ``(image, mask, label)`` samples, for BGAugment in anyone's training loop: the training
engine's own view of a split behind a plain integer index, so a DataLoader's default collate batches it for
:class:`~bgbias.bgaugment.bgaugment.BGAugment` on the device (or composites per sample with ``transform=``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Literal

import torch
from pydantic import Field

from bgbias.bgaugment.mask_check import saliency_masks
from bgbias.data.items import default_masks_dir
from bgbias.data.registry import open_dataset
from bgbias.data.splits import split_items, with_contiguous_labels
from bgbias.data.train_geometry import train_geometry
from bgbias.data.train_images import TrainImages
from bgbias.errors import OptionError
from bgbias.options import FOLD, PATH, PIXELS, PROTOCOL, TEXT, checked


class MaskedImages:
    """The ``split`` of ``dataset`` with each image's saliency mask from ``masks`` (default
    ``masks/<dataset key>``); labels renumbered 0 … ``num_classes`` − 1. Each access draws a fresh crop and
    flip from torch's global generator (``torch.manual_seed`` makes them reproducible). A missing or stale
    mask is an error before the first sample. ``transform(image, mask)``, when given, replaces the image."""

    @checked(dataset=TEXT, root=PATH,
             split=Annotated[Literal["train", "val", "test"], Field(examples=["train"])], masks=PATH,
             crop=PIXELS, protocol=PROTOCOL, fold=FOLD)
    def __init__(
        self,
        dataset: str,
        root: str | os.PathLike[str] | None = None,
        *,
        split: str = "train",
        masks: str | os.PathLike[str] | None = None,
        crop: int | None = None,
        protocol: str = "fixed",
        fold: int = 0,
        transform: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    ):
        if transform is not None and not callable(transform):
            raise OptionError(f"transform={transform!r} is not callable",
                              fix="pass transform=a function of (image, mask), e.g. a bgbias.BGAugment")
        opened = open_dataset(dataset, root)
        items = split_items(opened, split, protocol, fold)
        masks_dir = Path(masks) if masks is not None else default_masks_dir(opened)
        mask_files = saliency_masks(items, masks_dir, opened.name)
        geometry = train_geometry(opened.name)
        if crop is not None:
            geometry = dataclasses.replace(geometry, crop=crop)
        self.images = TrainImages(with_contiguous_labels(items), geometry, mask_files,
                                  dataset_name=opened.name)
        self.num_classes = len({item.label for item in items})
        self.transform = transform

    @property
    def labels(self) -> list[int]:
        """Each sample's label, in index order (what an m-per-class sampler needs)."""
        return [item.label for item in self.images.items]

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        seed = int(torch.randint(0, 2**62, ()))
        sample = self.images[(index, seed)]
        image, mask = sample["image"], sample["mask"]
        if self.transform is not None:
            image = self.transform(image, mask)
        return image, mask, sample["label"]
