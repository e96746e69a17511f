"""What a training run is made of, checked and built before its folder exists: the dataset's splits and
masks, BGAugment, the method on its backbone, the optimiser and the training loader."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from bgbias.backgrounds.pool import default_pools, list_pool
from bgbias.bgaugment.background_bank import train_bank
from bgbias.bgaugment.bgaugment import BGAugment
from bgbias.bgaugment.mask_check import saliency_masks
from bgbias.corrupted.manifests import split_pool_dir
from bgbias.data.items import default_masks_dir
from bgbias.data.loader import ImageLoader
from bgbias.data.registry import open_dataset
from bgbias.data.samplers import MPerClassBatchSampler
from bgbias.data.splits import split_items
from bgbias.engine import distributed
from bgbias.engine.config import TrainConfig
from bgbias.engine.device import loader_workers
from bgbias.engine.tensorboard_log import check_tensorboard
from bgbias.engine.trained import configured_method
from bgbias.engine.training_data import train_images
from bgbias.methods.base import MethodSpec
from bgbias.saliency.records import masks_record

if TYPE_CHECKING:
    from bgbias.data.items import Dataset, Item
    from bgbias.data.train_images import TrainImages
    from bgbias.methods.base import Method


@dataclass
class RunInputs:
    """What a run is made of that can be checked, and built, before its folder exists."""

    dataset: Dataset
    train_items: list[Item]
    val_items: list[Item]
    test_items: list[Item]  # watched (schedule.watch_test), else empty
    masks_dir: Path
    masks: dict[str, Any]
    """``run.json``'s record of the masks the run composites or validates with (:func:`_used_masks`)."""
    bgaugment: Any
    images: TrainImages
    method: Method
    loader: Any
    sampler: Any
    trained_on: dict[str, Any]


def prepare_inputs(config: TrainConfig, device: torch.device, dist: distributed.Distributed) -> RunInputs:
    """Everything that can fail on the user's input, checked and built before the run folder exists."""
    dataset = open_dataset(config.dataset, config.root)
    train_items = split_items(dataset, "train", config.protocol, config.fold)
    val_items = split_items(dataset, "val", config.protocol, config.fold)
    watched = config.schedule.watch_test
    test_items = split_items(dataset, "test", config.protocol, config.fold) if watched else []
    masks_dir = Path(config.bgaugment.masks) if config.bgaugment.masks else default_masks_dir(dataset)
    if config.log.tensorboard:
        check_tensorboard()
    train_masks = _check_masks(config, dataset, train_items, val_items, test_items, masks_dir)
    bgaugment = _bgaugment(config, device) if config.bgaugment.enabled else None
    torch.manual_seed(config.seed)
    images = train_images(config, dataset, train_items, train_masks)
    method = build_method(config, train_items, input_size=images.geometry.crop).to(device)
    loader, sampler = make_train_loader(config, images, device, dist)
    return RunInputs(dataset, train_items, val_items, test_items, masks_dir,
                     _used_masks(config, masks_dir, bool(test_items)), bgaugment, images, method, loader,
                     sampler, _trained_on(dataset))


def build_method(config: TrainConfig, train_items: list[Item], *, input_size: int) -> Method:
    """The configured method on its backbone, sized for ``train_items`` and square ``input_size`` images."""
    spec = MethodSpec(
        embedding_dim=config.model.embedding_dim,
        num_classes=len({item.label for item in train_items}),
        num_samples=len(train_items),
        pooling=config.model.pooling,
        options=dict(config.loss),
        input_size=input_size,
    )
    return configured_method(config, spec, pretrained=True)


def build_optimizer(config: TrainConfig, method: Method) -> torch.optim.Optimizer:
    """The configured optimizer over the method's parameter groups, each with its learning rate."""
    rates = {"backbone": config.optim.lr_backbone, "head": config.optim.lr_head, "loss": config.optim.lr_loss}
    groups = [
        {"params": params, "lr": rates[name], "name": name}
        for name, params in method.parameter_groups().items() if params
    ]
    o = config.optim
    kind = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "rmsprop": torch.optim.RMSprop,
            "sgd": torch.optim.SGD}[o.name]
    momentum = {"momentum": o.momentum} if o.name in ("rmsprop", "sgd") else {}
    return kind(groups, weight_decay=o.weight_decay, **momentum)


def hold_group(optimizer: torch.optim.Optimizer, name: str) -> None:
    """Drop group ``name``'s gradients so the coming step leaves it untouched: a warm-up epoch."""
    for group in optimizer.param_groups:
        if group.get("name") == name:
            for parameter in group["params"]:
                parameter.grad = None


def _used_masks(config: TrainConfig, masks_dir: Path, watched: bool) -> dict[str, Any]:
    """The masks folder and what made its masks (:func:`~bgbias.saliency.records.masks_record`) where the run
    uses them (BGAugment, a corrupted validation, a watched test set), else both ``None``."""
    used = config.bgaugment.enabled or config.monitor == "corrupted" or watched
    return masks_record(masks_dir.resolve() if used else None)


def _check_masks(
    config: TrainConfig, dataset: Dataset, train_items: list[Item], val_items: list[Item],
    test_items: list[Item], masks_dir: Path,
) -> list[Path] | None:
    """Before any training: every image that will be composited has its mask, and each corrupted set (the
    validation one when selecting on it, the watched test one) its pool (else a clear error)."""
    train_masks = saliency_masks(train_items, masks_dir, dataset.name) if config.bgaugment.enabled else None
    backgrounds = Path(config.bgaugment.backgrounds) if config.bgaugment.backgrounds else None
    if config.monitor == "corrupted":
        saliency_masks(val_items, masks_dir, dataset.name)
        list_pool(split_pool_dir("val", backgrounds))
    if test_items:
        saliency_masks(test_items, masks_dir, dataset.name)
        list_pool(split_pool_dir("test", backgrounds))
    return train_masks


def make_train_loader(
    config: TrainConfig, images: TrainImages, device: torch.device,
    dist: distributed.Distributed | None = None,
):
    """The training DataLoader and its batch sampler (``set_epoch`` it before each epoch)."""
    d = config.data
    workers = loader_workers(d.workers, device)
    sampler = MPerClassBatchSampler(
        [item.label for item in images.items], d.m_per_class, d.batch_size, config.seed,
        rank=dist.rank if dist else 0, world_size=dist.world_size if dist else 1,
        batches_per_epoch=d.batches_per_epoch,
    )
    loader = ImageLoader(
        images, batch_sampler=sampler,
        num_workers=workers, pin_memory=device.type == "cuda", persistent_workers=workers > 0,
        generator=torch.Generator().manual_seed(config.seed),
    )
    return loader, sampler


def _bgaugment(config: TrainConfig, device: torch.device):
    root = Path(config.bgaugment.backgrounds) if config.bgaugment.backgrounds else default_pools()
    return BGAugment(train_bank(root, device), config.bgaugment.p)


def _trained_on(dataset: Dataset) -> dict[str, Any]:
    """What ``run.json`` records of the training dataset, so evaluation can tell if it meets the same one."""
    return {"name": dataset.name, "root": str(dataset.root), "identity": dataset.identity(),
            "images": len(dataset.items())}
