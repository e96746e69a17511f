"""The training images, and the training split as a method sees it between epochs.

The training loop and :class:`TrainingPasses` draw from the same :func:`train_images`. DCML re-learns its
environment weights between epochs from fresh batches and randomness of its own: :class:`TrainingPasses` keys
both by (run seed, stream, epoch, pass), so a resumed run repeats an uninterrupted one and every rank of a
distributed run sees the same batches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm import tqdm

from bgbias.bgaugment.generators import keyed_generator
from bgbias.data.loader import ImageLoader
from bgbias.data.samplers import MPerClassBatchSampler
from bgbias.data.splits import with_contiguous_labels
from bgbias.data.train_geometry import TrainGeometry, train_geometry
from bgbias.data.train_images import TrainImages
from bgbias.engine.device import loader_workers
from bgbias.methods.base import Batch

if TYPE_CHECKING:
    from bgbias.bgaugment.bgaugment import BGAugment
    from bgbias.data.items import Dataset, Item
    from bgbias.engine.config import TrainConfig


def device_batch(
    batch: dict[str, Any], bgaugment: BGAugment | None, key: list[int], device: torch.device
) -> Batch:
    """A loader batch (uint8 images, masks, labels, indices) as a :class:`Batch` on ``device``: float RGB
    in [0, 1], composited onto backgrounds drawn from a generator keyed by ``key`` when ``bgaugment`` is
    given."""
    pixels = batch["image"].to(device, non_blocking=True)
    if bgaugment is not None:
        pixels = bgaugment(pixels, batch["mask"].to(device, non_blocking=True), keyed_generator(key))
    else:
        pixels = pixels.float().div_(255)
    return Batch(
        pixels, batch["label"].to(device, non_blocking=True), batch["index"].to(device, non_blocking=True)
    )


def train_geometry_of(config: TrainConfig, dataset_name: str) -> TrainGeometry:
    """The dataset's training geometry with the configuration's resize, crop and crop scale."""
    default = train_geometry(dataset_name)
    d = config.data
    return TrainGeometry(
        resize=d.resize if d.resize is not None else default.resize,
        crop=d.crop if d.crop is not None else default.crop,
        scale=d.crop_scale, ratio=default.ratio, flip_p=default.flip_p,
    )


def train_images(
    config: TrainConfig, dataset: Dataset, items: list[Item], masks: list[Path] | None
) -> TrainImages:
    """The training images with the paired geometry and contiguous labels (proxy losses index 0 … C−1)."""
    return TrainImages(with_contiguous_labels(items), train_geometry_of(config, dataset.name), masks,
                       dataset_name=dataset.name)


@dataclass
class TrainingPasses:
    """Keyed passes over the training split: what methods get as their ``TrainingData``. ``images``: the
    training loop's own (:func:`train_images`); ``log``: where a pass a method makes before an epoch's steps
    says what it does (the run's log)."""

    config: TrainConfig
    images: TrainImages
    bgaugment: BGAugment | None
    device: torch.device
    _: KW_ONLY
    progress: bool = False
    log: Callable[[str], None] | None = None

    @property
    def num_samples(self) -> int:
        return len(self.images)

    def batches(self, *, stream: int, epoch: int, pass_index: int, batch_size: int,
                desc: str = "") -> Iterator[Batch]:
        """One coverage pass of m-per-class batches of ``batch_size`` (m from the configuration), every
        image at least once, in an order and with augmentations keyed by (seed, stream, epoch, pass)."""
        key = [self.config.seed, stream, epoch, pass_index]
        if self.log is not None and desc:
            self.log(f"epoch {epoch}, before its steps: {desc} over the {len(self.images)} training images")
        sampler = MPerClassBatchSampler(
            [item.label for item in self.images.items], self.config.data.m_per_class, batch_size,
            int(np.random.SeedSequence(key).generate_state(1)[0]),
        )
        loader = ImageLoader(
            self.images, batch_sampler=sampler,
            num_workers=loader_workers(self.config.data.workers, self.device),
            pin_memory=self.device.type == "cuda",
        )
        for step, batch in enumerate(tqdm(loader, desc=desc, unit="batch", leave=False,
                                          disable=not self.progress)):
            yield device_batch(batch, self.bgaugment, [*key, step], self.device)

    def generator(self, *, stream: int, epoch: int) -> torch.Generator:
        """A torch generator on the device keyed by (seed, stream, epoch), e.g. to initialise state."""
        seed = int(np.random.SeedSequence([self.config.seed, stream, epoch]).generate_state(1)[0])
        return torch.Generator(self.device).manual_seed(seed)
