"""The training loop: any registered method, with or without BGAugment, on one device or many.

One epoch: sampler → CPU workers (decode + one paired geometric transform of image and mask, uint8) →
device (BGAugment composite, input convention inside the backbone) → ``method.loss`` → optimizer. After every
epoch the validation split is embedded (clean, and corrupted with train-pool backgrounds when that selects
the model), the best checkpoint is kept, early stopping is checked and ``last.pt`` is written, so a killed run
continues exactly with :func:`resume_training`.

Randomness is keyed, never drawn from shared state: batches by (seed, epoch), each image's augmentation by
the seed its draw carries, BGAugment's backgrounds by (seed, epoch, step, rank). A resumed run therefore
sees exactly the batches, crops and backgrounds of an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bgbias.engine import distributed
from bgbias.engine.checkpoint import load_checkpoint, save_checkpoint
from bgbias.engine.config import TrainConfig, load_run_config
from bgbias.engine.device import autocast, resolve_amp, resolve_device
from bgbias.engine.embedding import embed_images
from bgbias.engine.run_dir import (
    RunDir,
    RunLog,
    RunStatus,
    claim_run,
    create_run_dir,
    holds_results,
    mark_latest,
    open_run_dir,
    read_trained_on,
    run_name,
    this_process,
    write_metrics,
    write_record,
)
from bgbias.engine.tensorboard_log import EpochScalars, check_tensorboard
from bgbias.engine.training_data import TrainingPasses, device_batch, train_images
from bgbias.errors import BgbiasError, DatasetError, OptionError
from bgbias.installation import installation
from bgbias.signals import sigterm_as_interrupt

if TYPE_CHECKING:
    import torch

    from bgbias.data.items import Dataset, Item
    from bgbias.data.train_images import TrainImages
    from bgbias.methods.base import Batch, Method

_BGAUGMENT_STREAM = 0xB6A0


class TrainingDiverged(BgbiasError):
    """The loss became NaN or infinite."""


@dataclass
class TrainResult:
    """What a finished (or early-stopped) run produced."""

    run: RunDir
    history: list[dict[str, Any]]
    best_epoch: int
    best_value: float
    status: RunStatus


@dataclass
class _State:
    """What changes from epoch to epoch and goes into ``last.pt``."""

    epoch: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    best_epoch: int = 0
    best_value: float = -math.inf
    bad_epochs: int = 0
    status: RunStatus = RunStatus.RUNNING


# ----------------------------------------------------------------------------------------------- entries
def train(
    config: TrainConfig,
    *,
    run_dir: str | os.PathLike[str] | None = None,
    runs: str | os.PathLike[str] | None = None,
    progress: bool = True,
    echo: bool = True,
) -> TrainResult:
    """Train a new run of ``config``; its folder is ``run_dir`` or a new one under ``runs`` (./runs)."""
    dist = distributed.from_environment()
    return _run(config, lambda held: (_make_run_dir(config, run_dir, runs, dist, held), None), dist, progress,
                echo)


def resume_training(
    run_dir: str | os.PathLike[str],
    *,
    progress: bool = True,
    echo: bool = True,
) -> TrainResult:
    """Continue a run from its ``last.pt`` with the configuration saved in its folder.

    A run killed before its first checkpoint starts again from the beginning. A run that another process is
    training is a ``BusyError`` (:func:`~bgbias.engine.run_dir.claim_run`).
    """
    run = open_run_dir(run_dir)
    dist = distributed.from_environment()

    def claimed(held: contextlib.ExitStack) -> tuple[RunDir, dict[str, Any] | None]:
        if dist.is_main:
            held.enter_context(claim_run(run.root))
        # Read once the run is held: another trainer may have written it until then.
        return run, load_checkpoint(run.last) if run.last.is_file() else None

    return _run(load_run_config(run.config), claimed, dist, progress, echo)


# ------------------------------------------------------------------------------------------------ the run
@dataclass
class _Inputs:
    """What a run is made of that can be checked, and built, before its folder exists."""

    dataset: Dataset
    train_items: list[Item]
    val_items: list[Item]
    test_items: list[Item]  # watched (schedule.watch_test), else empty
    masks_dir: Path
    bgaugment: Any
    images: TrainImages
    method: Method
    loader: Any
    sampler: Any
    trained_on: dict[str, Any]


def _run(
    config: TrainConfig,
    make_run: Callable[[contextlib.ExitStack], tuple[RunDir, dict[str, Any] | None]],
    dist: distributed.Distributed,
    progress: bool,
    echo: bool,
) -> TrainResult:
    """Train in the folder ``make_run`` gives, claimed in the stack it is handed, from the checkpoint it
    gives (None: from the start). SIGTERM is taken like Ctrl-C meanwhile (:mod:`bgbias.signals`), so a
    preempted run records "interrupted" and resumes exactly."""
    device = resolve_device(config.device, dist.local_rank)
    distributed.init_process_group(dist, device.type)
    try:
        with sigterm_as_interrupt(), contextlib.ExitStack() as held:
            inputs = _prepare(config, device, dist)
            run, checkpoint = make_run(held)
            _check_same_dataset(run, inputs.trained_on)
            session: _Session | None = None
            try:
                session = _Session.start(config, run, inputs, checkpoint, device, dist, progress, echo)
                return session.train()
            except BaseException as error:
                if dist.is_main:
                    _record_stop(run, config, session.state if session is not None else _State(), device,
                                 inputs.trained_on, error)
                if session is not None:
                    with contextlib.suppress(BgbiasError):  # the disk that stopped the run may refuse this
                        session.close_logs()
                raise
    finally:
        distributed.destroy_process_group(dist)


def _record_stop(run: RunDir, config: TrainConfig, state: _State, device, trained_on: dict[str, Any],
                 error: BaseException) -> None:
    """Say in ``run.json`` that the run stopped on ``error`` (else it would read "running" for good):
    "interrupted" after Ctrl-C or SIGTERM, else "failed" with the error. On a disk too full for even that
    the record keeps its last state and ``error``, which says why, is what the caller sees."""
    state.status = RunStatus.INTERRUPTED if isinstance(error, KeyboardInterrupt) else RunStatus.FAILED
    with contextlib.suppress(BgbiasError):
        write_record(run, {**_record(config, state, device, trained_on), "error": _error_text(error)})


def _prepare(config: TrainConfig, device: torch.device, dist: distributed.Distributed) -> _Inputs:
    """Everything that can fail on the user's input, checked and built before the run folder exists."""
    import torch

    from bgbias.data.registry import open_dataset
    from bgbias.data.splits import split_items

    dataset = open_dataset(config.dataset, config.root)
    train_items = split_items(dataset, "train", config.protocol, config.fold)
    val_items = split_items(dataset, "val", config.protocol, config.fold)
    watched = config.schedule.watch_test
    test_items = split_items(dataset, "test", config.protocol, config.fold) if watched else []
    masks_dir = _masks_dir(config, dataset)
    if config.log.tensorboard:
        check_tensorboard()
    train_masks = _check_masks(config, dataset, train_items, val_items, test_items, masks_dir)
    bgaugment = _bgaugment(config, device) if config.bgaugment.enabled else None
    torch.manual_seed(config.seed)
    images = train_images(config, dataset, train_items, train_masks)
    method = build_method(config, train_items, input_size=images.geometry.crop).to(device)
    loader, sampler = make_train_loader(config, images, device, dist)
    return _Inputs(dataset, train_items, val_items, test_items, masks_dir, bgaugment, images, method, loader,
                   sampler, _trained_on(dataset))


@dataclass
class _Session:
    """A run in progress: its inputs, model, optimizer and validation sets, where it writes, and its state.

    The loop is :meth:`train` → :meth:`epoch` → :meth:`step`; a method's hooks run at their one place each:
    ``on_epoch_start`` before an epoch's steps, ``loss`` inside a step, ``on_step_end`` after its update.
    """

    config: TrainConfig
    run: RunDir
    inputs: _Inputs
    device: torch.device
    amp: Any
    dist: distributed.Distributed
    progress: bool
    log: RunLog
    model: Any
    optimizer: torch.optim.Optimizer
    scaler: Any
    training_data: TrainingPasses
    validation: _Validation | None
    state: _State
    scalars: EpochScalars | None = None

    @classmethod
    def start(cls, config: TrainConfig, run: RunDir, inputs: _Inputs, checkpoint: dict[str, Any] | None,
              device: torch.device, dist: distributed.Distributed, progress: bool, echo: bool) -> _Session:
        """Set up the run in its folder: a new one, or one continued from ``checkpoint``."""
        import torch

        from bgbias.fileio import write_json_atomic

        amp = resolve_amp(config.amp, device)
        log = RunLog(run.log if dist.is_main else None, echo=echo and dist.is_main)
        if dist.is_main and checkpoint is None:
            write_json_atomic(run.config, config.as_dict())
        method = inputs.method
        optimizer = build_optimizer(config, method)
        scaler = torch.amp.GradScaler(device.type, enabled=amp == torch.float16)
        state = _State()
        if checkpoint is not None:
            state = _restore(checkpoint, method, optimizer, scaler, device)
            log(f"resuming {run.root} after epoch {state.epoch}")
        model = _wrap_distributed(method, dist, device)
        training_data = TrainingPasses(config, inputs.images, inputs.bgaugment, device,
                                     progress=progress and dist.is_main)
        validation = _validation_sets(config, inputs, run, dist, fresh=checkpoint is None)
        scalars = EpochScalars(run.root) if config.log.tensorboard and dist.is_main else None
        session = cls(config, run, inputs, device, amp, dist, progress, log, model, optimizer, scaler,
                      training_data, validation, state, scalars)
        if dist.is_main:
            # A resumed run is running again (its record said "interrupted" or "failed"), in this process.
            write_record(run, session.record())
        if dist.is_main and checkpoint is None:
            mark_latest(run)
            log(f"run {run.root}: {config.method} on {inputs.dataset.name} ({len(inputs.train_items)} train "
                f"/ {len(inputs.val_items)} val images), {'with' if inputs.bgaugment else 'without'} "
                f"BGAugment, on {device}")
        return session

    @property
    def method(self) -> Method:
        return self.inputs.method

    def record(self) -> dict[str, Any]:
        return _record(self.config, self.state, self.device, self.inputs.trained_on)

    def train(self) -> TrainResult:
        """Epoch 0's validation (once), then epochs until the schedule ends or early stopping."""
        state, config = self.state, self.config
        if state.epoch == 0 and not state.history and config.schedule.validate_untrained:
            row = {"epoch": 0, **self.validate()}
            state.history.append(row)
            if self.dist.is_main:
                self.log(_describe(row))
                if self.scalars is not None:
                    self.scalars.add(row)
        while state.status == RunStatus.RUNNING and state.epoch < config.schedule.epochs:
            self.epoch()
        self.close_logs()
        if state.status == RunStatus.STOPPED_EARLY and self.dist.is_main:
            self.log(f"stopped early: no better validation MAP@R for {config.schedule.patience} epochs")
        return TrainResult(self.run, state.history, state.best_epoch, state.best_value, state.status)

    def close_logs(self) -> None:
        """Close the TensorBoard writer and its thread, if any (also when the run stops on an error)."""
        scalars, self.scalars = self.scalars, None
        if scalars is not None:
            scalars.close()

    def epoch(self) -> None:
        """One epoch: the method's epoch-start hook, the steps, validation, selection, checkpoint, records."""
        state, dist = self.state, self.dist
        state.epoch += 1
        started = time.perf_counter()
        updates = self.method.on_epoch_start(state.epoch, self.training_data)
        if updates:
            updates["epoch_start_seconds"] = round(time.perf_counter() - started, 3)
            started = time.perf_counter()
        terms, images = self.train_steps()
        seconds = time.perf_counter() - started
        row = {"epoch": state.epoch, **updates, **terms, "train_seconds": round(seconds, 3),
               "train_images_per_second": round(images / seconds, 2)}
        row.update(self.validate())
        state.history.append(row)
        _select(state, row, self.config, self.method, self.run, dist)
        if state.epoch >= self.config.schedule.epochs:
            state.status = RunStatus.FINISHED
        if dist.is_main:
            self.log(_describe(row))
            save_checkpoint(self.run.last, _checkpoint(state, self.method, self.optimizer, self.scaler,
                                                       self.device))
            write_metrics(self.run, state.history)
            self.plot_curves()
            if self.scalars is not None:
                self.scalars.add(row)
            write_record(self.run, self.record())
        distributed.barrier(dist)

    def plot_curves(self) -> None:
        """``curves.png`` from the rows so far: a killed run keeps the picture of what it did."""
        from bgbias.engine.curves import plot_training_curves

        config = self.config
        title = (f"{config.method}{' + BGAugment' if config.bgaugment.enabled else ''} on {config.dataset}, "
                 f"seed {config.seed}: {self.run.root.name}")
        plot_training_curves(self.state.history, self.run.curves, title=title,
                             best_epoch=self.state.best_epoch or None, monitor=config.monitor)

    def train_steps(self) -> tuple[dict[str, float], int]:
        """One pass over the loader; the mean of every loss term over the optimiser steps and the number of
        images this process saw."""
        from tqdm import tqdm

        epoch, method = self.state.epoch, self.method
        self.inputs.sampler.set_epoch(epoch)
        method.train()
        sums: dict[str, torch.Tensor] = {}
        steps = images_seen = 0
        show = self.progress and self.dist.is_main
        bar = tqdm(self.inputs.loader, desc=f"epoch {epoch}", unit="batch", leave=False, disable=not show)
        for step, batch in _optimizer_steps(bar, method, self.config, self.inputs.bgaugment, epoch, self.dist,
                                            self.device):
            terms = self.step(batch, step)
            for name, value in terms.items():
                sums[name] = sums.get(name, 0) + value.detach().float()
            steps += 1
            images_seen += batch.images.shape[0] if batch.part == 0 else 0
            if show and step % 10 == 0:
                bar.set_postfix(loss=f"{terms['loss'].item():.4f}")
        means = {f"train_{name}": round(float(total) / max(steps, 1), 6) for name, total in sums.items()}
        return means, images_seen

    def step(self, batch: Batch, step: int) -> dict[str, torch.Tensor]:
        """One optimiser step on ``batch``: forward (the method's ``loss``), a finite-loss check, backward,
        clipping, the update (without the backbone group during ``optim.warmup_epochs``), then the method's
        ``on_step_end``; returns the loss terms."""
        import torch

        with autocast(self.device, self.amp):
            terms = self.model(batch)
        loss = terms["loss"]
        if not torch.isfinite(loss.detach()):
            raise TrainingDiverged(
                f"the loss became {loss.item()} at epoch {self.state.epoch}, step {step}",
                fix="lower the learning rates (--set optim.lr_head=...), or clip gradients "
                    "(--set optim.grad_clip=1.0)",
            )
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        if self.state.epoch <= self.config.optim.warmup_epochs:
            hold_group(self.optimizer, "backbone")
        if self.clips(batch, step):
            self.scaler.unscale_(self.optimizer)
            groups = [group["params"] for group in self.optimizer.param_groups]
            if not self.config.optim.grad_clip_per_group:
                groups = [[p for params in groups for p in params]]
            for params in groups:
                torch.nn.utils.clip_grad_norm_(params, self.config.optim.grad_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.method.on_step_end(batch)
        return terms

    def clips(self, batch: Batch, step: int) -> bool:
        """Whether this optimiser step clips its gradients: every step with ``optim.grad_clip``, or the run's
        first alone with ``grad_clip_first_step_only`` (epoch 1, its first batch's first part; the epoch
        and step decide, so a resumed run clips exactly what an uninterrupted one did)."""
        o = self.config.optim
        if o.grad_clip is None:
            return False
        return not o.grad_clip_first_step_only or (self.state.epoch == 1 and step == 0 and batch.part == 0)

    def validate(self) -> dict[str, float]:
        return _validate(self.method, self.validation, self.config, self.device, self.amp, self.progress,
                         self.dist)


# ----------------------------------------------------------------------------------------------- building
def build_method(config: TrainConfig, train_items: list[Item], *, input_size: int) -> Method:
    """The configured method on its backbone, sized for ``train_items`` (labels made contiguous) and for
    square images of side ``input_size`` (the training crop)."""
    from bgbias.methods.base import MethodSpec
    from bgbias.methods.registry import method_class
    from bgbias.models.registry import build_backbone

    cls = method_class(config.method)
    backbone = build_backbone(
        config.model.backbone, pretrained=config.model.pretrained,
        weights=Path(config.model.weights) if config.model.weights else None,
        freeze_batchnorm=config.model.freeze_batchnorm,
    )
    spec = MethodSpec(
        embedding_dim=config.model.embedding_dim,
        num_classes=len({item.label for item in train_items}),
        num_samples=len(train_items),
        pooling=config.model.pooling,
        options=dict(config.loss),
        input_size=input_size,
    )
    return cls(backbone, spec)


def build_optimizer(config: TrainConfig, method: Method) -> torch.optim.Optimizer:
    """The configured optimizer over the method's parameter groups, each with its learning rate."""
    import torch

    rates = {"backbone": config.optim.lr_backbone, "head": config.optim.lr_head, "loss": config.optim.lr_loss}
    groups = [
        {"params": params, "lr": rates[name], "name": name}
        for name, params in method.parameter_groups().items() if params
    ]
    o = config.optim
    if o.name == "adam":
        return torch.optim.Adam(groups, weight_decay=o.weight_decay)
    if o.name == "adamw":
        return torch.optim.AdamW(groups, weight_decay=o.weight_decay)
    if o.name == "rmsprop":
        return torch.optim.RMSprop(groups, weight_decay=o.weight_decay, momentum=o.momentum)
    return torch.optim.SGD(groups, weight_decay=o.weight_decay, momentum=o.momentum)


def hold_group(optimizer: torch.optim.Optimizer, name: str) -> None:
    """Drop the gradients of parameter group ``name``, so the coming ``optimizer.step()`` leaves its
    parameters and their optimiser state (moments, step counts) untouched, weight decay included: a warm-up
    epoch.

    The epoch number alone decides it, so a resumed run holds the same steps an uninterrupted one did.
    """
    for group in optimizer.param_groups:
        if group.get("name") == name:
            for parameter in group["params"]:
                parameter.grad = None


def _make_run_dir(
    config: TrainConfig, run_dir: str | os.PathLike[str] | None, runs: str | os.PathLike[str] | None,
    dist: distributed.Distributed, held: contextlib.ExitStack,
) -> RunDir:
    """The new run's folder, claimed in ``held`` (rank 0) before it is checked, so that of two processes
    starting the same run one trains it and the other is refused."""
    from bgbias.fileio import make_dirs

    if dist.is_main:
        if run_dir is not None:
            path = Path(run_dir)
            held.enter_context(claim_run(path))
            if holds_results(path):
                raise OptionError("the run folder exists and is not empty", path=path,
                                  fix="choose a new folder, or continue it with --resume")
            make_dirs(path / "checkpoints")
            run = RunDir(path)
        else:
            name = run_name(config.dataset, config.method, config.bgaugment.enabled, config.seed)
            run = create_run_dir(name, Path(runs) if runs is not None else None)
            held.enter_context(claim_run(run.root))
        root = str(run.root)
    else:
        root = None
    return RunDir(Path(distributed.broadcast(dist, root)))


def _masks_dir(config: TrainConfig, dataset: Dataset) -> Path:
    from bgbias.data.items import default_masks_dir

    return Path(config.bgaugment.masks) if config.bgaugment.masks else default_masks_dir(dataset)


def _check_masks(
    config: TrainConfig, dataset: Dataset, train_items: list[Item], val_items: list[Item],
    test_items: list[Item], masks_dir: Path,
) -> list[Path] | None:
    """Before any training: every image that will be composited has its mask, and each corrupted set (the
    validation one when selecting on it, the watched test one) its pool (else a clear error)."""
    from bgbias.augment.manifests import split_pool_dir
    from bgbias.augment.mask_check import saliency_masks
    from bgbias.backgrounds.pool import list_pool

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
    """The training DataLoader over ``images`` (:func:`train_images`) and its batch sampler (``set_epoch`` it
    before each epoch)."""
    import torch

    from bgbias.data.loader import ImageLoader
    from bgbias.data.samplers import MPerClassBatchSampler

    d = config.data
    sampler = MPerClassBatchSampler(
        [item.label for item in images.items], d.m_per_class, d.batch_size, config.seed,
        rank=dist.rank if dist else 0, world_size=dist.world_size if dist else 1,
        batches_per_epoch=d.batches_per_epoch,
    )
    loader = ImageLoader(
        images, batch_sampler=sampler,
        num_workers=d.workers, pin_memory=device.type == "cuda", persistent_workers=d.workers > 0,
        generator=torch.Generator().manual_seed(config.seed),
    )
    return loader, sampler


def _bgaugment(config: TrainConfig, device: torch.device):
    from bgbias.augment.background_bank import train_bank
    from bgbias.augment.bgaugment import BGAugment
    from bgbias.paths import backgrounds_root

    root = Path(config.bgaugment.backgrounds) if config.bgaugment.backgrounds else backgrounds_root()
    return BGAugment(train_bank(root, device), config.bgaugment.p)


def _wrap_distributed(method: Method, dist: distributed.Distributed, device: torch.device):
    if not dist.enabled:
        return method
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(method, device_ids=ids)


# -------------------------------------------------------------------------------------------------- epoch
def _optimizer_steps(loader, method, config, bgaugment, epoch, dist, device):
    """(loader step, batch) for every optimiser step: each loader batch composited once on the device, then
    handed out ``method.steps_per_batch`` times, with ``part`` 0, 1, …"""
    for step, batch in enumerate(loader):
        rng = np.random.default_rng([config.seed, epoch, step, dist.rank, _BGAUGMENT_STREAM])
        on_device = device_batch(batch, bgaugment, rng, device)
        for part in range(method.steps_per_batch):
            yield step, dataclasses.replace(on_device, part=part)


# --------------------------------------------------------------------------------------------- validation
@dataclass(frozen=True)
class _Validation:
    """The image sets scored after every epoch, by metrics-column prefix: ``val`` (and ``val_corrupted``
    when selecting on it), plus ``test`` and ``test_corrupted`` when ``schedule.watch_test`` (never selected
    on)."""

    sets: dict[str, Any]


def _validation_sets(config, inputs: _Inputs, run, dist, fresh) -> _Validation | None:
    """The validation images: clean, plus the run's fixed corrupted set (train pool) when it selects; and the
    watched test split, clean and the first corrupted repeat ``bgbias eval`` scores (test pool, seed 0)."""
    if not dist.is_main:
        return None
    from bgbias.augment.corrupted_images import CorruptedImages
    from bgbias.augment.manifests import load_manifest, make_corrupted_manifests, manifest_name
    from bgbias.data.eval_images import EvalImages
    from bgbias.data.transforms import eval_geometry

    dataset, geometry = inputs.dataset, eval_geometry(inputs.dataset.name)
    backgrounds = Path(config.bgaugment.backgrounds) if config.bgaugment.backgrounds else None

    def corrupted(split: str, items: list[Item], seed: int, folder: Path) -> Any:
        path = folder / manifest_name(0)
        if fresh or not path.is_file():
            make_corrupted_manifests(dataset, split, repeats=1, seed=seed, backgrounds=backgrounds,
                                     out_dir=folder, protocol=config.protocol, fold=config.fold)
        manifest = load_manifest(path, dataset, backgrounds)
        return CorruptedImages(items, manifest, inputs.masks_dir, dataset.name)

    sets: dict[str, Any] = {"val": EvalImages(inputs.val_items, geometry)}
    if config.monitor == "corrupted":
        sets["val_corrupted"] = corrupted("val", inputs.val_items, config.seed, run.corrupted_val)
    if inputs.test_items:
        sets["test"] = EvalImages(inputs.test_items, geometry)
        sets["test_corrupted"] = corrupted("test", inputs.test_items, 0, run.corrupted_test)
    return _Validation(sets)


def _validate(method, validation, config, device, amp, progress, dist) -> dict[str, float]:
    """MAP@R, R-precision and P@1 of every set of ``validation`` (:class:`_Validation`), ranked by the
    method's own retrieval as evaluation ranks; rank 0 only."""
    from bgbias.retrieval.metrics import score_embeddings

    row: dict[str, float] = {}
    if dist.is_main:
        for prefix, images in validation.sets.items():
            state, labels = embed_images(
                method, images, device, batch_size=2 * config.data.batch_size, workers=config.data.workers,
                amp=amp, progress=progress, desc=prefix,
            )
            scores = score_embeddings(state, labels, retrieval=method.retrieval())
            for name, value in scores.as_dict().items():
                row[f"{prefix}_{name}"] = value
    return distributed.broadcast(dist, row)


def _select(state: _State, row: dict[str, Any], config: TrainConfig, method, run: RunDir, dist) -> None:
    """Keep the best checkpoint by the monitored MAP@R; stop early after ``patience`` epochs without gain."""
    key = "val_corrupted_map_at_r" if config.monitor == "corrupted" else "val_map_at_r"
    value = row[key]
    if value > state.best_value:
        state.best_value, state.best_epoch, state.bad_epochs = value, state.epoch, 0
        if dist.is_main:
            save_checkpoint(run.best, {"epoch": state.epoch, "monitor": key, "value": value,
                                       "spec": dataclasses.asdict(method.spec), "model": method.state_dict()})
    else:
        state.bad_epochs += 1
        if state.bad_epochs >= config.schedule.patience:
            state.status = RunStatus.STOPPED_EARLY


# --------------------------------------------------------------------------------------------- persisting
def _checkpoint(state: _State, method, optimizer, scaler, device) -> dict[str, Any]:
    import torch

    return {
        "epoch": state.epoch,
        "spec": dataclasses.asdict(method.spec),
        "model": method.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
        "history": state.history,
        "best_epoch": state.best_epoch,
        "best_value": state.best_value,
        "bad_epochs": state.bad_epochs,
        "status": state.status.value,
    }


def _restore(checkpoint: dict[str, Any], method, optimizer, scaler, device) -> _State:
    import torch

    method.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    scaler.load_state_dict(checkpoint["scaler"])
    torch.set_rng_state(checkpoint["torch_rng"])
    if checkpoint["cuda_rng"] is not None and device.type == "cuda":
        torch.cuda.set_rng_state(checkpoint["cuda_rng"], device)
    return _State(
        epoch=checkpoint["epoch"], history=list(checkpoint["history"]), best_epoch=checkpoint["best_epoch"],
        best_value=checkpoint["best_value"], bad_epochs=checkpoint["bad_epochs"],
        status=RunStatus(checkpoint["status"]),
    )


def _record(config: TrainConfig, state: _State, device, trained_on: dict[str, Any]) -> dict[str, Any]:
    return {
        "status": state.status.value,
        "epochs_done": state.epoch,
        "best_epoch": state.best_epoch,
        "best_value": None if state.best_epoch == 0 else state.best_value,
        "monitor": "val_corrupted_map_at_r" if config.monitor == "corrupted" else "val_map_at_r",
        "method": config.method,
        "dataset": config.dataset,
        "trained_on": trained_on,
        "bgaugment": config.bgaugment.enabled,
        "device": str(device),
        "installation": installation(),
        "command": " ".join(sys.argv),
        "process": this_process(),
    }


def _trained_on(dataset: Dataset) -> dict[str, Any]:
    """What ``run.json`` records of the training dataset, so evaluation can tell if it meets the same one."""
    return {"name": dataset.name, "root": str(dataset.root), "identity": dataset.identity(),
            "images": len(dataset.items())}


def _check_same_dataset(run: RunDir, trained_on: dict[str, Any]) -> None:
    """A resumed run must go on with the images and labels it started with."""
    recorded = read_trained_on(run)
    if recorded is not None and recorded["identity"] != trained_on["identity"]:
        raise DatasetError(
            f"the {trained_on['name']} dataset at {trained_on['root']} changed since this run started "
            f"({trained_on['images']} images now, {recorded.get('images')} then)",
            path=run.record,
            fix="restore the dataset the run started on, or start a new run",
        )


def _error_text(error: BaseException) -> str:
    """How ``run.json`` names the error a run stopped on."""
    if isinstance(error, BgbiasError):
        return error.render()
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _describe(row: dict[str, Any]) -> str:
    parts = [f"epoch {row['epoch']}"]
    if "train_loss" in row:
        parts.append(f"loss {row['train_loss']:.4f}")
    parts.append(f"val MAP@R {row['val_map_at_r']:.4f}")
    if "val_corrupted_map_at_r" in row:
        parts.append(f"corrupted {row['val_corrupted_map_at_r']:.4f}")
    if "test_map_at_r" in row:
        parts.append(f"watched test {row['test_map_at_r']:.4f}, "
                     f"corrupted {row['test_corrupted_map_at_r']:.4f}")
    if "train_images_per_second" in row:
        parts.append(f"{row['train_images_per_second']:.0f} img/s")
    return ", ".join(parts)
