"""What a training run writes about itself and reads back: its state in ``last.pt``, its record in
``run.json``, its new folder, and the check that a resumed run meets the dataset it started on."""

from __future__ import annotations

import contextlib
import math
import os
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bgbias.engine import distributed
from bgbias.engine.config import TrainConfig
from bgbias.engine.device import compute_record
from bgbias.engine.run_dir import (
    RunDir,
    RunStatus,
    claim_run,
    create_run_dir,
    read_trained_on,
    run_name,
    write_record,
)
from bgbias.errors import BgbiasError, DatasetError, OptionError
from bgbias.fileio import holds_files, make_dirs
from bgbias.installation import installation


@dataclass
class TrainingState:
    """What changes from epoch to epoch and goes into ``last.pt``."""

    epoch: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    best_epoch: int = 0
    best_value: float = -math.inf
    bad_epochs: int = 0
    status: RunStatus = RunStatus.RUNNING


def record_stop(run: RunDir, config: TrainConfig, state: TrainingState, device, trained_on: dict[str, Any],
                masks: dict[str, Any], error: BaseException) -> None:
    """Say in ``run.json`` that the run stopped on ``error`` (else it would read "running" for good):
    "interrupted" after Ctrl-C or SIGTERM, else "failed" with the error. On a disk too full for even that
    the record keeps its last state and ``error``, which says why, is what the caller sees."""
    state.status = RunStatus.INTERRUPTED if isinstance(error, KeyboardInterrupt) else RunStatus.FAILED
    with contextlib.suppress(BgbiasError):
        record = run_record(config, state, device, trained_on, masks)
        write_record(run, {**record, "error": _error_text(error)})


def make_run_dir(
    config: TrainConfig, run_dir: str | os.PathLike[str] | None, runs: str | os.PathLike[str] | None,
    dist: distributed.Distributed, held: contextlib.ExitStack,
) -> RunDir:
    """The new run's folder, claimed before it is checked, so of two processes only one trains it."""
    root = None
    if dist.is_main:
        if run_dir is not None:
            path = Path(run_dir)
            held.enter_context(claim_run(path))
            if holds_files(path):  # the lock and an empty checkpoints/ do not count
                raise OptionError("the run folder exists and is not empty", path=path,
                                  fix="choose a new folder, or continue it with --resume")
            make_dirs(path / "checkpoints")
            run = RunDir(path)
        else:
            name = run_name(config.dataset, config.method, config.bgaugment.enabled, config.seed)
            run = create_run_dir(name, Path(runs) if runs is not None else None)
            held.enter_context(claim_run(run.root))
        root = str(run.root)
    return RunDir(Path(distributed.broadcast(dist, root)))


def checkpoint_state(state: TrainingState, method, optimizer, scaler, device) -> dict[str, Any]:
    return {
        "epoch": state.epoch,
        "spec": method.spec.saved(),
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


def restore_state(checkpoint: dict[str, Any], method, optimizer, scaler, device) -> TrainingState:
    method.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    scaler.load_state_dict(checkpoint["scaler"])
    torch.set_rng_state(checkpoint["torch_rng"])
    if checkpoint["cuda_rng"] is not None and device.type == "cuda":
        torch.cuda.set_rng_state(checkpoint["cuda_rng"], device)
    return TrainingState(
        epoch=checkpoint["epoch"], history=list(checkpoint["history"]), best_epoch=checkpoint["best_epoch"],
        best_value=checkpoint["best_value"], bad_epochs=checkpoint["bad_epochs"],
        status=RunStatus(checkpoint["status"]),
    )


def run_record(config: TrainConfig, state: TrainingState, device, trained_on: dict[str, Any],
               masks: dict[str, Any]) -> dict[str, Any]:
    """``run.json``: the run's state, what it trained on (the dataset, and ``masks``: the masks folder and
    what made its masks where it uses any), the machine, the installation and the process."""
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
        **masks,
        "device": str(device),
        "compute": compute_record(config, device),
        "installation": installation(),
        "command": " ".join(sys.argv),
        "process": {"pid": os.getpid(), "host": socket.gethostname()},
    }


def check_same_dataset(run: RunDir, trained_on: dict[str, Any]) -> None:
    """A resumed run must go on with the images and labels it started with."""
    recorded = read_trained_on(run)
    if recorded is not None and recorded.identity != trained_on["identity"]:
        raise DatasetError(
            f"the {trained_on['name']} dataset at {trained_on['root']} changed since this run started "
            f"({trained_on['images']} images now, {recorded.images} then)",
            path=run.record,
            fix="restore the dataset the run started on, or start a new run",
        )


def _error_text(error: BaseException) -> str:
    """How ``run.json`` names the error a run stopped on."""
    if isinstance(error, BgbiasError):
        return error.render()
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
