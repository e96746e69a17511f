"""Stand-ins for the study's tests that run it in several processes: of :func:`bgbias.study.worker.work` for
the SLURM tests (module-level functions, pickled by reference, so that a submitit subprocess imports them),
and of the steps' work for the tests of two ``bgbias study`` processes on one folder
(:func:`recording_steps`). Each records its calls in files of the study folder."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bgbias.signals import Terminated

STAGES = "stages.json"
"""In the study folder: the stages' step ids, as the test submits them."""

WAIT_S = 120
"""How long a stand-in waits for the steps before it, or for its preemption, before it fails."""


def marker(step: str) -> str:
    """A step id as a file name (``run/x`` → ``run_x``)."""
    return step.replace("/", "_")


def recording_work(folder: Path, goals: Sequence[str], *, only: str | None = None,
                   device: str = "auto") -> str:
    """Wait until every step of the stages before ``only``'s is done (as the worker waits for a step's
    dependencies), then record the call in ``calls/`` (with the steps done by then) and mark the step done in
    ``done/`` (created exclusively: a second execution of a step fails)."""
    assert only is not None
    stages = json.loads((folder / STAGES).read_text())
    own = next(number for number, steps in enumerate(stages) if only in steps)
    earlier = [step for steps in stages[:own] for step in steps]
    done = folder / "done"
    deadline = time.monotonic() + WAIT_S
    while not all((done / marker(step)).exists() for step in earlier):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{only}: the steps before it were not done in {WAIT_S} s")
        time.sleep(0.02)
    calls = folder / "calls"
    calls.mkdir(exist_ok=True)
    done.mkdir(exist_ok=True)
    record = {"step": only, "goals": list(goals), "device": device, "pid": os.getpid(),
              "done_before": sorted(path.name for path in done.iterdir())}
    (calls / f"{marker(only)}.{os.getpid()}.{time.time_ns()}").write_text(json.dumps(record))
    with (done / marker(only)).open("x") as file:
        file.write(str(os.getpid()))
    return f"did {only}"


def preemptible_work(folder: Path, goals: Sequence[str], *, only: str | None = None,
                     device: str = "auto") -> str:
    """First call: write ``attempts/1`` (its pid), then wait to be preempted; the interruption it gets is
    recorded in ``interrupted`` before it goes on (as the worker releases its claim). A later call (the
    requeued task) marks the step done and returns."""
    attempts = folder / "attempts"
    attempts.mkdir(exist_ok=True)
    attempt = len(list(attempts.iterdir())) + 1
    if attempt > 1:
        (attempts / str(attempt)).write_text(str(os.getpid()))
        return f"resumed {only} at attempt {attempt}"
    try:
        (attempts / "1").write_text(str(os.getpid()))
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            time.sleep(0.02)
    except Terminated as interruption:
        (folder / "interrupted").write_text(f"{type(interruption).__name__}: {interruption}")
        raise
    raise TimeoutError(f"{only}: not preempted in {WAIT_S} s")


CALLS = "calls.log"
"""In the study folder: a line per step's work done by :func:`recording_steps`, ``<what> <pid>``."""


def recorded_calls(folder: Path) -> list[str]:
    return (folder / CALLS).read_text().splitlines()


def recording_steps(folder: Path, pause_before: str | None = None,
                    pause: Callable[[], None] | None = None) -> dict[tuple[Any, str], Callable[..., Any]]:
    """Stand-ins of the work of a study's steps, keyed by (module, name) for ``setattr``: the bench's
    preparation, a run's training and measurement and the page each append a line to :data:`CALLS` and do
    nothing else; the training of the run ``pause_before`` calls ``pause`` first."""
    from bgbias.study import steps

    def record(what: str) -> None:
        with open(folder / CALLS, "a", encoding="utf-8") as calls:
            calls.write(f"{what} {os.getpid()}\n")

    def prepare(spec: Any, log: Callable[[str], None]) -> dict[str, str]:
        record("prepare")
        return {}

    def train_study_run(study: Path, run: Any, spec: Any, device: str, log: Callable[[str], None], *,
                        processes: int = 1) -> Path:
        if run.folder_name == pause_before and pause is not None:
            pause()
        record(f"train {run.folder_name}")
        return study / run.folder_name

    def measure_run(run_dir: Path, *args: Any) -> None:
        record(f"measure {run_dir.name}")

    def report_study(run_dirs: Sequence[Path], out: Path, **options: Any) -> dict[str, Path]:
        record(f"page {len(run_dirs)} runs")
        return {}

    # Keyed where the steps look the names up (bgbias.study.steps imports them at its top).
    return {(steps, "prepare"): prepare, (steps, "train_study_run"): train_study_run,
            (steps, "measure_run"): measure_run, (steps, "report_study"): report_study}
