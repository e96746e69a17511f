"""Start or resume a training run: any registered method, with or without BGAugment, on one device or many.

Randomness is keyed, never drawn from shared state (batches by (seed, epoch), BGAugment by (seed, epoch,
step, rank)), so a resumed run sees exactly the batches, crops and backgrounds of an uninterrupted one
(docs/training.md). The jobs live in ``training_build``, ``training_loop`` and ``training_records``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

from bgbias.engine import distributed
from bgbias.engine.checkpoint import load_checkpoint
from bgbias.engine.config import TrainConfig, load_run_config
from bgbias.engine.device import resolve_device
from bgbias.engine.run_dir import RunDir, claim_run, open_run_dir
from bgbias.engine.training_build import prepare_inputs
from bgbias.engine.training_loop import TrainingSession, TrainResult
from bgbias.engine.training_records import TrainingState, check_same_dataset, make_run_dir, record_stop
from bgbias.errors import BgbiasError
from bgbias.signals import sigterm_as_interrupt


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
    return _run(config, lambda held: (make_run_dir(config, run_dir, runs, dist, held), None), dist, progress,
                echo)


def resume_training(
    run_dir: str | os.PathLike[str],
    *,
    progress: bool = True,
    echo: bool = True,
) -> TrainResult:
    """Continue a run from its ``last.pt`` (or its start) with its saved configuration."""
    run = open_run_dir(run_dir)
    dist = distributed.from_environment()

    def claimed(held: contextlib.ExitStack) -> tuple[RunDir, dict[str, Any] | None]:
        if dist.is_main:
            held.enter_context(claim_run(run.root))
        # Read once the run is held: another trainer may have written it until then.
        return run, load_checkpoint(run.last) if run.last.is_file() else None

    return _run(load_run_config(run.config), claimed, dist, progress, echo)


def _run(
    config: TrainConfig,
    make_run: Callable[[contextlib.ExitStack], tuple[RunDir, dict[str, Any] | None]],
    dist: distributed.Distributed,
    progress: bool,
    echo: bool,
) -> TrainResult:
    """Train in the folder and from the checkpoint ``make_run`` gives; SIGTERM counts as Ctrl-C."""
    device = resolve_device(config.device, dist.local_rank)
    with distributed.process_group(dist, device.type), sigterm_as_interrupt(), contextlib.ExitStack() as held:
        inputs = prepare_inputs(config, device, dist)
        run, checkpoint = make_run(held)
        check_same_dataset(run, inputs.trained_on)
        session: TrainingSession | None = None
        try:
            session = TrainingSession.start(config, run, inputs, checkpoint, device, dist, progress, echo)
            return session.train()
        except BaseException as error:
            if dist.is_main:
                state = session.state if session is not None else TrainingState()
                record_stop(run, config, state, device, inputs.trained_on, inputs.masks, error)
            raise
        finally:
            if session is not None:
                # Before the process group is left: the session's DistributedDataParallel wrapper holds it.
                with contextlib.suppress(BgbiasError):  # the disk that stopped the run may refuse this
                    session.close()
