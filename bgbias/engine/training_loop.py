"""The training loop: a run in progress, epoch by epoch and step by step, validated after every epoch (the
best checkpoint kept, early stopping), and what it ends with."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from bgbias.corrupted.corrupted_images import CorruptedImages
from bgbias.corrupted.manifests import load_manifest, make_corrupted_manifests, manifest_name
from bgbias.data.eval_images import EvalImages
from bgbias.data.transforms import eval_geometry
from bgbias.engine import distributed
from bgbias.engine.checkpoint import save_checkpoint
from bgbias.engine.config import TrainConfig
from bgbias.engine.curves import plot_training_curves
from bgbias.engine.device import resolve_amp
from bgbias.engine.embedding import embed_images
from bgbias.engine.eta import ESTIMATE_AFTER, epoch_estimate, time_left
from bgbias.engine.loss_watch import LossWatch
from bgbias.engine.run_dir import RunDir, RunLog, RunStatus, mark_latest, write_metrics, write_record
from bgbias.engine.tensorboard_log import EpochScalars
from bgbias.engine.training_build import RunInputs, build_optimizer, hold_group
from bgbias.engine.training_data import TrainingPasses, device_batch
from bgbias.engine.training_records import TrainingState, checkpoint_state, restore_state, run_record
from bgbias.fileio import write_json_atomic
from bgbias.models.precision import network_precision
from bgbias.retrieval.metrics import score_embeddings

if TYPE_CHECKING:
    from bgbias.data.items import Item
    from bgbias.methods.base import Batch, Method


_BGAUGMENT_STREAM = 0xB6A0


@dataclass
class TrainResult:
    run: RunDir
    history: list[dict[str, Any]]
    best_epoch: int
    best_value: float
    status: RunStatus


@dataclass
class TrainingSession:
    """A run in progress. The loop is :meth:`train` → :meth:`epoch` → :meth:`step`; a method's hooks run at
    one place each: ``on_epoch_start`` before an epoch's steps, ``loss`` in a step, ``on_step_end`` after."""

    config: TrainConfig
    run: RunDir
    inputs: RunInputs
    device: torch.device
    amp: Any
    dist: distributed.Distributed
    progress: bool
    log: RunLog
    model: Any
    optimizer: torch.optim.Optimizer
    scaler: Any
    training_data: TrainingPasses
    validation: dict[str, Any] | None
    state: TrainingState
    scalars: EpochScalars | None = None
    estimated: bool = False
    epoch_seconds: list[float] = field(default_factory=list)
    """Wall time of each epoch this session trained, validation included: the pace of its time left."""
    loss_watch: LossWatch = field(default_factory=LossWatch)
    """The finite-loss check, read on the host every few steps and at each epoch's end, not every step."""

    @classmethod
    def start(cls, config: TrainConfig, run: RunDir, inputs: RunInputs, checkpoint: dict[str, Any] | None,
              device: torch.device, dist: distributed.Distributed, progress: bool,
              echo: bool) -> TrainingSession:
        """Set up the run in its folder: a new one, or one continued from ``checkpoint``."""
        amp = resolve_amp(config.amp, device)
        log = RunLog(run.log if dist.is_main else None, echo=echo and dist.is_main)
        if dist.is_main and checkpoint is None:
            write_json_atomic(run.config, config.as_dict())
        method = inputs.method
        optimizer = build_optimizer(config, method)
        scaler = torch.amp.GradScaler(device.type, enabled=amp == torch.float16)
        state = TrainingState()
        if checkpoint is not None:
            state = restore_state(checkpoint, method, optimizer, scaler, device)
            log(f"resuming {run.root} after epoch {state.epoch}")
        ids = [device.index] if device.type == "cuda" else None
        model = DistributedDataParallel(method, device_ids=ids) if dist.enabled else method
        training_data = TrainingPasses(config, inputs.images, inputs.bgaugment, device,
                                     progress=progress and dist.is_main, log=log)
        validation = validation_sets(config, inputs, run, dist, fresh=checkpoint is None)
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
        return run_record(self.config, self.state, self.device, self.inputs.trained_on, self.inputs.masks)

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
        self.close()
        if state.status == RunStatus.STOPPED_EARLY and self.dist.is_main:
            self.log(f"stopped early: no better validation MAP@R for {config.schedule.patience} epochs")
        return TrainResult(self.run, state.history, state.best_epoch, state.best_value, state.status)

    def close(self) -> None:
        """Let go of the DistributedDataParallel wrapper (its reducer holds the process group:
        :func:`~bgbias.engine.distributed.process_group`), the TensorBoard writer and the loader's workers."""
        self.model = None
        self.inputs.loader.close()
        scalars, self.scalars = self.scalars, None
        if scalars is not None:
            scalars.close()

    def epoch(self) -> None:
        """One epoch: the method's epoch-start hook, the steps, validation, selection, checkpoint, records."""
        state, dist = self.state, self.dist
        state.epoch += 1
        started = epoch_started = time.perf_counter()
        updates = self.method.on_epoch_start(state.epoch, self.training_data)
        if updates:
            updates["epoch_start_seconds"] = round(time.perf_counter() - started, 3)
            started = time.perf_counter()
        terms, images = self.train_steps()
        self.loss_watch.check()  # before the epoch is validated, selected or saved
        seconds = time.perf_counter() - started
        row = {"epoch": state.epoch, **updates, **terms, "train_seconds": round(seconds, 3),
               "train_images_per_second": round(images / seconds, 2)}
        row.update(self.validate())
        state.history.append(row)
        self.select(row)
        if state.epoch >= self.config.schedule.epochs:
            state.status = RunStatus.FINISHED
        self.epoch_seconds.append(time.perf_counter() - epoch_started)
        if dist.is_main:
            self.log(_describe(row) + self.time_left())
            save_checkpoint(self.run.last, checkpoint_state(state, self.method, self.optimizer, self.scaler,
                                                       self.device))
            write_metrics(self.run, state.history)
            self.plot_curves()
            if self.scalars is not None:
                self.scalars.add(row)
            write_record(self.run, self.record())
        distributed.barrier(dist)

    def time_left(self) -> str:
        """``; about 3m05s left for 4 more epochs`` at the pace of this session's epochs (none at the end)."""
        left = self.config.schedule.epochs - self.state.epoch
        if self.state.status != RunStatus.RUNNING or left <= 0:
            return ""
        done = len(self.epoch_seconds)
        return f"; {time_left(done, done + left, sum(self.epoch_seconds))} epochs"

    def plot_curves(self) -> None:
        """``curves.png`` from the rows so far: a killed run keeps the picture of what it did."""
        config = self.config
        title = (f"{config.method}{' + BGAugment' if config.bgaugment.enabled else ''} on {config.dataset}, "
                 f"seed {config.seed}: {self.run.root.name}")
        plot_training_curves(self.state.history, self.run.curves, title=title,
                             best_epoch=self.state.best_epoch or None, monitor=config.monitor)

    def train_steps(self) -> tuple[dict[str, float], int]:
        """One pass over the loader: every loss term's mean and the number of images seen."""
        epoch, method = self.state.epoch, self.method
        self.inputs.sampler.set_epoch(epoch)
        method.train()
        sums: dict[str, torch.Tensor] = {}
        steps = images_seen = 0
        show = self.progress and self.dist.is_main
        bar = tqdm(self.inputs.loader, desc=f"epoch {epoch}", unit="batch", leave=False, disable=not show)
        started, batches = time.perf_counter(), len(self.inputs.loader)
        for step, batch in _optimizer_steps(bar, method, self.config, self.inputs.bgaugment, epoch, self.dist,
                                            self.device):
            terms = self.step(batch, step)
            last_part = batch.part == method.steps_per_batch - 1
            if not self.estimated and last_part and step + 1 >= min(ESTIMATE_AFTER, batches):
                self.estimated = True
                if self.dist.is_main:
                    self.log(epoch_estimate(time.perf_counter() - started, step + 1, batches,
                                            self.config.schedule.epochs - epoch + 1))
            for name, value in terms.items():
                sums[name] = sums.get(name, 0) + value.detach().float()
            steps += 1
            images_seen += batch.images.shape[0] if batch.part == 0 else 0
            if show and step % 10 == 0:
                bar.set_postfix(loss=f"{terms['loss'].item():.4f}")
        means = {f"train_{name}": round(float(total) / max(steps, 1), 6) for name, total in sums.items()}
        return means, images_seen

    def step(self, batch: Batch, step: int) -> dict[str, torch.Tensor]:
        """One optimiser step on ``batch``; returns the loss terms."""
        with network_precision(self.amp):
            terms = self.model(batch)
        loss = terms["loss"]
        self.loss_watch.see(loss, self.state.epoch, step)
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
        """Whether this optimiser step clips; epoch and step decide, so a resumed run clips alike."""
        o = self.config.optim
        if o.grad_clip is None:
            return False
        return not o.grad_clip_first_step_only or (self.state.epoch == 1 and step == 0 and batch.part == 0)

    def validate(self) -> dict[str, float]:
        """MAP@R, R-precision and P@1 of every validation set, ranked as evaluation ranks; rank 0 only."""
        row: dict[str, float] = {}
        if self.dist.is_main:
            for prefix, images in self.validation.items():
                state, labels = embed_images(
                    self.method, images, self.device, batch_size=2 * self.config.data.batch_size,
                    workers=self.config.data.workers, amp=self.amp, progress=self.progress, desc=prefix,
                )
                scores = score_embeddings(state, labels, retrieval=self.method.retrieval())
                row.update({f"{prefix}_{name}": value for name, value in scores.as_dict().items()})
        return distributed.broadcast(self.dist, row)

    def select(self, row: dict[str, Any]) -> None:
        """Keep the best checkpoint by the monitored MAP@R; stop early after ``patience`` epochs without
        gain."""
        state, config = self.state, self.config
        key = "val_corrupted_map_at_r" if config.monitor == "corrupted" else "val_map_at_r"
        value, method = row[key], self.method
        if value > state.best_value:
            state.best_value, state.best_epoch, state.bad_epochs = value, state.epoch, 0
            if self.dist.is_main:
                save_checkpoint(self.run.best, {"epoch": state.epoch, "monitor": key, "value": value,
                                                "spec": method.spec.saved(), "model": method.state_dict()})
        else:
            state.bad_epochs += 1
            if state.bad_epochs >= config.schedule.patience:
                state.status = RunStatus.STOPPED_EARLY


def validation_sets(config, inputs: RunInputs, run, dist, fresh) -> dict[str, Any] | None:
    """The image sets scored after every epoch, by metrics-column prefix: ``val``, clean, and
    ``val_corrupted``, the run's fixed corrupted set (train pool), when it selects on it; with
    ``schedule.watch_test`` (never selected on) ``test`` and ``test_corrupted``, the first corrupted repeat
    ``bgbias eval`` scores (test pool, seed 0)."""
    if not dist.is_main:
        return None

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
    return sets


def _optimizer_steps(loader, method, config, bgaugment, epoch, dist, device):
    """(loader step, batch) for every optimiser step: each loader batch composited once on the device, then
    handed out ``method.steps_per_batch`` times, with ``part`` 0, 1, …"""
    for step, batch in enumerate(loader):
        key = [config.seed, epoch, step, dist.rank, _BGAUGMENT_STREAM]
        on_device = device_batch(batch, bgaugment, key, device)
        for part in range(method.steps_per_batch):
            yield step, dataclasses.replace(on_device, part=part)


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
