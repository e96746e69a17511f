"""The study folder's plan (``plan.json``): every step, what it needs, its state, who holds it, where and when
it ran, its inputs' digests and its error.

Several processes, on several machines, work on one plan: each change is made holding ``.plan.lock`` (which
NFS forwards) and replaces the file atomically, so a reader without the lock always sees a whole plan. A
claim whose process is gone (same machine) or that was not renewed for :data:`STALE_AFTER` seconds (another
machine) is dead, and its step is taken over, up to :data:`MAX_ATTEMPTS` times.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import Field

from bgbias.errors import RecordError
from bgbias.fileio import exclusive_lock, json_bytes, write_bytes_atomic
from bgbias.options import EXPLAIN_IMAGES
from bgbias.paths import leaves_folder
from bgbias.schema import FORMAT_VERSION, ClosedRecord, read_record
from bgbias.study.plan import StudyRun
from bgbias.study.spec import StudySpec

PLAN = "plan.json"
PLAN_LOCK = ".plan.lock"
PLAN_FORMAT = "bgbias-study-plan"

RENEW_EVERY = 15.0
"""Seconds between renewals of a running step's claim."""
STALE_AFTER = 120.0
"""Seconds without renewal after which a claim from another machine is dead (a node lost, a job killed)."""
MAX_ATTEMPTS = 3
"""Starts of a step whose worker died each time before it is recorded as failed (a run that kills its
process, e.g. by running out of memory, must not be retried for ever)."""

StepKind = Literal["prepare", "masks", "run", "page"]
StepState = Literal["pending", "running", "done", "failed"]
FINISHED: tuple[StepState, ...] = ("done", "failed")


class Claim(ClosedRecord):
    """The process running a step: ``machine`` is the kernel's boot id, which tells two hosts of one name
    (containers) apart; ``started`` is the process's start time, which tells a reused pid apart."""

    token: str
    host: str
    machine: str
    pid: int
    started: int
    device: str
    heartbeat: float


class RunArgs(ClosedRecord):
    """A run step's run (:class:`~bgbias.study.plan.StudyRun`), whether it is profiled and whether its
    evaluation also cuts the corrupted repeats out with the study's second masks (``compare_masks``)."""

    method: str
    bgaugment: bool
    seed: int
    watch_test: bool = False
    settings: list[str] = Field(default_factory=list)
    profile: bool = False
    explain_images: int = EXPLAIN_IMAGES
    compare_masks: bool = False

    def study_run(self) -> StudyRun:
        """The run these arguments plan (its folder, its label)."""
        return StudyRun(self.method, self.bgaugment, self.seed, self.watch_test, tuple(self.settings))


class PageArgs(ClosedRecord):
    """A page step's folder (in the study folder), and the ``--set`` settings of its runs as its title
    names them (``", every run with schedule.epochs=2"``; empty for a plain plan)."""

    folder: str
    variant: str


class Step(ClosedRecord):
    """One step of the plan. ``needs``: the steps that must be done first (a page needs its runs finished,
    done or failed); ``inputs``: digests of what it was made from, written when it is done."""

    kind: StepKind
    needs: list[str] = Field(default_factory=list)
    shard: list[int] | None = None
    """``[index, count]`` of a masks step."""
    run: RunArgs | None = None
    page: PageArgs | None = None
    state: StepState = "pending"
    attempts: int = 0
    claim: Claim | None = None
    host: str | None = None
    device: str | None = None
    started: float | None = None
    finished: float | None = None
    inputs: dict[str, str] = Field(default_factory=dict)
    error: str | None = None
    traceback: str | None = None


class UnstartedWorker(ClosedRecord):
    """A worker that could not start on its device (``cuda (GPU 1)``: the device asked for and the GPUs it
    was given), and why; ``--status`` shows it, and a worker that starts on that device later clears it."""

    host: str
    device: str
    error: str
    at: float


class Plan(ClosedRecord):
    """``plan.json``: the study's dataset and inputs, its steps in the order they are taken, and the workers
    that could not start."""

    format: Literal["bgbias-study-plan"] = PLAN_FORMAT
    version: Literal[1] = FORMAT_VERSION
    spec: StudySpec
    steps: dict[str, Step]
    unstarted: list[UnstartedWorker] = Field(default_factory=list)


def read_plan(folder: Path) -> Plan | None:
    """The plan of the study folder, None when it has none; a damaged one is a ``RecordError``."""
    path = folder / PLAN
    if not path.is_file():
        return None
    plan = read_record(path, Plan, what="the study's plan", fix=REMAKE, file_format=PLAN_FORMAT)
    check_plan(plan, path)
    return plan


REMAKE = ("remove it and run the same `bgbias study` command again: the plan is made anew, and finished runs "
          "and their measurements are kept")
"""The fix of a plan that cannot be read."""


def check_plan(plan: Plan, path: Path) -> None:
    """Refuse a plan whose step would write outside the study folder: a page or run step's folder (read from
    the plan, which may have been edited or received) must be the one its step id names, and lie inside the
    study folder (:func:`~bgbias.paths.leaves_folder`)."""
    for step_id, step in plan.steps.items():
        folder = (step.page.folder if step.page is not None
                  else step.run.study_run().folder_name if step.run is not None else None)
        if folder is None:
            continue
        prefix = "page/" if step.page is not None else "run/"
        reason = leaves_folder(folder)
        if reason is not None:
            raise RecordError(f"the plan's step {step_id} would write into {folder!r}, outside the study "
                              f"folder ({reason})", path=path, fix=REMAKE)
        if step_id != prefix + folder:
            raise RecordError(f"the plan's step {step_id} writes into {folder!r}, which does not match its "
                              "id", path=path, fix=REMAKE)


def update_plan(folder: Path, change: Callable[[Plan | None], Plan]) -> Plan:
    """Replace the plan by ``change(plan)`` while holding its lock, atomically and with its steps in their
    order (the order they are taken in); the new plan."""
    with exclusive_lock(folder / PLAN_LOCK, wait=True):
        plan = change(read_plan(folder))
        text = json.dumps(plan.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n"
        write_bytes_atomic(folder / PLAN, json_bytes(text))
    return plan


def state_counts(steps: Iterable[Step], order: tuple[StepState, ...]) -> str:
    """``3 done, 1 failed``: how many of ``steps`` are in each state of ``order`` that any is in."""
    states = [step.state for step in steps]
    return ", ".join(f"{states.count(state)} {state}" for state in order if state in states)


def with_step(plan: Plan, step_id: str, **changes: object) -> Plan:
    """``plan`` with the step ``step_id`` changed."""
    steps = dict(plan.steps)
    steps[step_id] = steps[step_id].model_copy(update=changes)
    return plan.model_copy(update={"steps": steps})


# ------------------------------------------------------------------------------------------------- claims
def new_claim(device: str) -> Claim:
    """A claim by this process."""
    return Claim(token=uuid.uuid4().hex, host=socket.gethostname(), machine=machine_id(), pid=os.getpid(),
                 started=process_start(os.getpid()) or 0, device=device, heartbeat=time.time())


def claim_is_dead(claim: Claim, now: float, stale_after: float = STALE_AFTER) -> bool:
    """Whether ``claim``'s process is gone: on this machine, its pid no longer runs the process that claimed;
    elsewhere, it was not renewed for ``stale_after`` seconds."""
    if claim.machine == machine_id():
        return process_start(claim.pid) != claim.started
    return now - claim.heartbeat > stale_after


@cache
def machine_id() -> str:
    """The kernel's boot id (a new one per machine and boot), else the host name."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        return socket.gethostname()


def process_start(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (``/proc/PID/stat``); None when it is gone.
    Where /proc is missing, 0 for a live process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        return None
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return 0
    fields = stat.rsplit(")", 1)[-1].split()
    if fields and fields[0] == "Z":  # a zombie has exited: its parent has yet to collect it
        return None
    return int(fields[19]) if len(fields) > 19 else 0


def required_plan(plan: Plan | None, folder: Path) -> Plan:
    """``plan``, read from the study folder where one is needed: None is a ``RecordError``."""
    if plan is None:
        raise RecordError("this folder holds no study plan", path=folder / PLAN,
                          fix="run `bgbias study` with the study's options first")
    return plan
