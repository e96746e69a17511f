"""A run folder (layout: docs/training.md, *Run folder*): the resolved configuration, the metrics of every
epoch, the log, the checkpoints, and ``.training.lock``, held by the process training the run
(:func:`claim_run`); ``runs/latest`` names the newest run.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from tqdm import tqdm

from bgbias.errors import BusyError, OptionError, RecordError, output_error
from bgbias.fileio import (
    exclusive_lock,
    make_dirs,
    reporting_write_errors,
    write_json_atomic,
    write_text_atomic,
)
from bgbias.installation import InstallationRecord
from bgbias.paths import runs_root
from bgbias.schema import Record, format_header, parse_record
from bgbias.schema import read_record as read_json_record

LATEST = "latest"
TRAINING_LOCK = ".training.lock"


class RunStatus(StrEnum):
    """Where a run stands, as ``run.json`` and its checkpoints record it."""

    RUNNING = "running"
    FINISHED = "finished"
    STOPPED_EARLY = "stopped early"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


DONE = (RunStatus.FINISHED, RunStatus.STOPPED_EARLY)
"""The statuses of a run with nothing left to train."""


class _File:
    """A path in the run folder, a property of :class:`RunDir`."""

    def __init__(self, *parts: str):
        self.parts = parts

    def __get__(self, run: RunDir, owner: type | None = None) -> Path:
        return run.root.joinpath(*self.parts)


@dataclass(frozen=True)
class RunDir:
    """The files of one run."""

    root: Path
    config = _File("config.json")
    record = _File("run.json")
    metrics_jsonl = _File("metrics.jsonl")
    metrics_csv = _File("metrics.csv")
    curves = _File("curves.png")
    log = _File("train.log")
    last = _File("checkpoints", "last.pt")
    best = _File("checkpoints", "best.pt")
    corrupted_val = _File("corrupted-val")
    corrupted_test = _File("corrupted-test")


def run_name(dataset: str, method: str, bgaugment: bool, seed: int, when: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(when))
    return f"{dataset}-{method}{'-bgaugment' if bgaugment else ''}-seed{seed}-{stamp}"


def create_run_dir(name: str, runs: Path | None = None) -> RunDir:
    """A new run folder under ``runs``, ``-2``, ``-3`` … appended when taken (created, not looked for)."""
    runs = runs if runs is not None else runs_root()
    make_dirs(runs)
    n = 1
    while True:
        candidate = runs / (name if n == 1 else f"{name}-{n}")
        try:
            candidate.mkdir()
        except FileExistsError:
            n += 1
            continue
        except OSError as error:
            raise output_error(error, candidate) from error
        make_dirs(candidate / "checkpoints")
        return RunDir(candidate)


@contextlib.contextmanager
def claim_run(root: str | os.PathLike[str], *, wait: bool = False) -> Iterator[RunDir]:
    """Hold the run folder ``root`` (created if missing) for training, between processes: another process's
    claim is a ``BusyError`` at once (``wait=True``: wait for it). The same thread may claim a run it holds
    again (the study, then training). The lock is the kernel's: a killed trainer leaves nothing behind."""
    run = RunDir(Path(root))
    busy = BusyError(
        f"another process is training this run{_holder(run)}",
        path=run.root,
        fix="wait for it to finish (bgbias study measures it then), or stop that process (its run.json then "
            "says interrupted) and resume the run with bgbias train --resume",
    )
    with exclusive_lock(run.root / TRAINING_LOCK, wait=wait, busy=busy):
        yield run


def _holder(run: RunDir) -> str:
    """`` (pid N on HOST)`` of the process its record says is training ``run``, else nothing."""
    record = read_record(run)
    process = None if record is None else record.process
    if record is None or record.status != RunStatus.RUNNING or not isinstance(process, dict):
        return ""
    return f" (pid {process.get('pid')} on {process.get('host')})"


def open_run_dir(path: str | os.PathLike[str]) -> RunDir:
    """An existing run folder (it must hold config.json)."""
    run = RunDir(Path(path))
    if not run.config.is_file():
        raise OptionError("this is not a run folder (no config.json)", path=run.root,
                          fix="pass a folder made by bgbias train, e.g. runs/<name>")
    return run


def mark_latest(run: RunDir) -> None:
    """Record ``run`` as the newest run of its runs folder."""
    write_text_atomic(run.root.parent / LATEST, run.root.name + "\n")


def latest_run(runs: Path | None = None) -> RunDir:
    """The run recorded by :func:`mark_latest`."""
    runs = runs if runs is not None else runs_root()
    pointer = runs / LATEST
    if not pointer.is_file():
        raise OptionError("there is no training run yet", path=pointer,
                          fix="train one with `bgbias train`, or name a run folder")
    return open_run_dir(runs / pointer.read_text(encoding="utf-8").strip())


def is_metric_number(value: Any) -> bool:
    """Whether a metrics cell holds a finite number (not a bool, None, NaN or text): what curves plot."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def write_metrics(run: RunDir, rows: list[dict[str, Any]]) -> None:
    """Write every epoch's metrics as JSON lines and as CSV (columns: all keys, in first-seen order)."""
    write_text_atomic(run.metrics_jsonl, "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))
    columns = list(dict.fromkeys(key for row in rows for key in row))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text_atomic(run.metrics_csv, buffer.getvalue())


class MetricsRow(Record):
    """A line of ``metrics.jsonl``: its epoch, then the epoch's numbers (NaN where a loss diverged)."""

    epoch: int

    @property
    def columns(self) -> dict[str, Any]:
        """The epoch's numbers by column (``loss``, ``test_map_at_r``, …): whatever training measured."""
        return self.model_extra or {}


class TrainedOnRecord(Record):
    name: str
    root: str
    identity: str
    images: int


RUN_FORMAT = "bgbias-run"


class RunRecord(Record):
    """``run.json`` as bgbias reads it back (:mod:`bgbias.schema`); training writes every field."""

    status: str
    best_epoch: int
    monitor: str
    trained_on: TrainedOnRecord
    installation: InstallationRecord
    process: Any = None
    """While a run trains, the process that trains it (pid and host), for the message a second trainer
    gets."""


RESUME_TO_REWRITE = "resume the run (bgbias train --resume RUN) to write it again"


def read_metrics(run: RunDir) -> list[MetricsRow]:
    """Every epoch's metrics row from ``metrics.jsonl``; a ``RecordError`` when it is missing or damaged."""
    try:
        lines = run.metrics_jsonl.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise RecordError(f"the run's metrics cannot be read ({error})", path=run.metrics_jsonl,
                          fix=RESUME_TO_REWRITE) from error
    return [parse_record(line, run.metrics_jsonl, MetricsRow, what=f"line {number} of the run's metrics",
                         fix=RESUME_TO_REWRITE)
            for number, line in enumerate(lines, 1) if line]


def write_record(run: RunDir, record: dict[str, Any]) -> None:
    """``run.json``: ``record`` under its format (:data:`RUN_FORMAT`)."""
    write_json_atomic(run.record, {**format_header(RUN_FORMAT), **record})


def read_record(run: RunDir) -> RunRecord | None:
    """``run.json``, or None when it is missing or damaged (the run then counts as unfinished)."""
    try:
        return read_json_record(run.record, RunRecord, what="the run's record", fix=RESUME_TO_REWRITE,
                                file_format=RUN_FORMAT)
    except RecordError:
        return None


def read_trained_on(run: RunDir) -> TrainedOnRecord | None:
    """The dataset a run trained on, as its record names it, or None (:func:`read_record`)."""
    record = read_record(run)
    return None if record is None else record.trained_on

@dataclass
class RunLog:
    """Lines to ``train.log`` (appended, with a timestamp) and, when ``echo``, to the terminal."""

    path: Path | None
    echo: bool = True

    def __call__(self, message: str) -> None:
        if self.echo:
            tqdm.write(message, file=sys.stderr)
        if self.path is not None:
            with reporting_write_errors(self.path), self.path.open("a", encoding="utf-8") as log:
                log.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}\n")
