"""A worker of a study: takes the next ready step of the plan, claims it, does it while renewing the claim,
records it done or failed, and goes on until nothing it may do is left. Every executor runs this loop;
workers share nothing but the plan (:mod:`bgbias.study.ledger`), so they may run on several machines.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import os
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from bgbias.engine.device import resolve_device
from bgbias.engine.eta import duration, time_left
from bgbias.errors import BgbiasError
from bgbias.signals import interruption_status, sigterm_as_interrupt
from bgbias.study.ledger import (
    FINISHED,
    MAX_ATTEMPTS,
    RENEW_EVERY,
    STALE_AFTER,
    Claim,
    Plan,
    Step,
    UnstartedWorker,
    claim_is_dead,
    new_claim,
    read_plan,
    required_plan,
    update_plan,
    with_step,
)
from bgbias.study.steps import execute_step

POLL_EVERY = 2.0
"""Seconds between looks at the plan while every step left waits for another worker."""


@dataclasses.dataclass(frozen=True)
class Timing:
    """How often a worker renews its claim, when another's claim is dead, and how often it looks again."""

    renew_every: float = RENEW_EVERY
    stale_after: float = STALE_AFTER
    poll_every: float = POLL_EVERY


DEFAULT_TIMING = Timing()


@dataclasses.dataclass
class WorkOutcome:
    """What one worker did: the steps it finished, and those that failed in its hands with their errors."""

    done: list[str] = dataclasses.field(default_factory=list)
    failed: dict[str, str] = dataclasses.field(default_factory=dict)


def needed_steps(plan: Plan, goals: Sequence[str]) -> list[str]:
    """The ``goals`` and every step they need, in the plan's order."""
    wanted: set[str] = set()
    stack = list(goals)
    while stack:
        step_id = stack.pop()
        if step_id not in wanted:
            wanted.add(step_id)
            stack.extend(plan.steps[step_id].needs)
    return [step_id for step_id in plan.steps if step_id in wanted]


def runs_progress(plan: Plan, goals: Sequence[str]) -> str | None:
    """``runs: 2 of 6 done (3m05s each); about 12m20s of run time left for 4 more`` for the run steps of
    ``goals``, at the pace of those done with their times in the plan (shared among the workers); None before
    the first."""
    runs = [plan.steps[step_id] for step_id in needed_steps(plan, goals) if plan.steps[step_id].kind == "run"]
    timed = [step.finished - step.started for step in runs
             if step.state == "done" and step.started is not None and step.finished is not None]
    if not timed:
        return None
    finished = sum(step.state in ("done", "failed") for step in runs)
    left = len(runs) - finished
    pace = f"{len(timed)} timed, {duration(sum(timed) / len(timed))} each"
    if not left:
        return f"runs: {finished} of {len(runs)} finished ({pace})"
    rest = time_left(len(timed), len(timed) + left, sum(timed))
    return f"runs: {finished} of {len(runs)} finished ({pace}); {rest.replace(' left', ' of run time left')}"


def work(
    folder: Path,
    goals: Sequence[str],
    *,
    only: str | None = None,
    device: str = "auto",
    threads: int | None = None,
    processes: int = 1,
    log: Callable[[str], None] = print,
    timing: Timing = DEFAULT_TIMING,
) -> WorkOutcome:
    """Do the ready steps among ``goals`` and what they need, until none is left that this worker may do.

    ``only``: do just that step (waiting for what it needs), then a page among ``goals`` if it has become
    ready (the last run of a job array writes the page). A SIGTERM or Ctrl-C during a step gives its claim
    back and is raised on.
    """
    if threads is not None:
        torch.set_num_threads(threads)
    outcome = WorkOutcome()
    label = _started_on(folder, device)
    with sigterm_as_interrupt():
        while True:
            claim = new_claim(label)
            picked = _claim_next(folder, goals, only, claim, timing, log)
            if picked is None:
                return outcome
            if picked == WAIT:
                time.sleep(timing.poll_every)
                continue
            _do_step(folder, goals, picked, claim, device, processes, log, timing, outcome)


WAIT = ""
"""What :func:`_claim_next` returns while every step left waits for other workers."""


def _claim_next(folder: Path, goals: Sequence[str], only: str | None, claim: Claim, timing: Timing,
                log: Callable[[str], None]) -> str | None:
    """Claim the first ready step this worker may do: its id; :data:`WAIT` when steps are left that are not
    ready yet; None when nothing is left for it."""
    picked: list[str | None] = [None]

    def change(plan: Plan | None) -> Plan:
        plan = required_plan(plan, folder)
        now = time.time()
        wanted = needed_steps(plan, goals)
        if only is not None:
            pages = [goal for goal in goals if plan.steps[goal].kind == "page"]
            wanted = [only] if plan.steps[only].state not in FINISHED else []
            wanted += [page for page in pages if _needs_finished(plan, page)]
        for step_id in wanted:
            plan = _settle_dead_claim(plan, step_id, now, timing, log)
            step = plan.steps[step_id]
            if step.state in FINISHED:
                continue
            failed_need = next((need for need in step.needs if plan.steps[need].state == "failed"), None)
            if step.state == "pending" and failed_need is not None and step.kind != "page":
                plan = with_step(plan, step_id, state="failed", error=f"it needs {failed_need}, which failed",
                                 finished=now)
                continue
            picked[0] = WAIT
            if step.state == "running":
                continue
            if not _needs_finished(plan, step_id, done_only=step.kind != "page"):
                continue
            picked[0] = step_id
            return with_step(plan, step_id, state="running", claim=claim, attempts=step.attempts + 1,
                             host=claim.host, device=claim.device, started=now, finished=None, error=None,
                             traceback=None)
        return plan

    update_plan(folder, change)
    return picked[0]


def _needs_finished(plan: Plan, step_id: str, *, done_only: bool = False) -> bool:
    states = ("done",) if done_only else FINISHED
    return all(plan.steps[need].state in states for need in plan.steps[step_id].needs)


def _settle_dead_claim(plan: Plan, step_id: str, now: float, timing: Timing,
                       log: Callable[[str], None]) -> Plan:
    """``plan`` with the step given back (or failed, after :data:`MAX_ATTEMPTS` starts) when the process
    holding it is gone."""
    step = plan.steps[step_id]
    if step.state != "running" or step.claim is None:
        return plan
    if not claim_is_dead(step.claim, now, timing.stale_after):
        return plan
    holder = f"pid {step.claim.pid} on {step.claim.host}"
    if step.attempts >= MAX_ATTEMPTS:
        log(f"[{step_id}] its worker ({holder}) died; {step.attempts} starts: recorded as failed")
        return with_step(plan, step_id, state="failed", claim=None, finished=now,
                         error=f"its worker died in each of {step.attempts} starts (last: {holder})")
    log(f"[{step_id}] its worker ({holder}) died: taken over")
    return with_step(plan, step_id, state="pending", claim=None)


def _do_step(folder: Path, goals: Sequence[str], step_id: str, claim: Claim, device: str, processes: int,
             log: Callable[[str], None], timing: Timing, outcome: WorkOutcome) -> None:
    """Do the claimed step, renewing the claim meanwhile, and record how it ended."""
    plan = required_plan(read_plan(folder), folder)

    def step_log(message: str) -> None:
        log(f"[{step_id}] {message}")

    stop = threading.Event()
    renewer = threading.Thread(target=_renew, args=(folder, step_id, claim, stop, timing.renew_every),
                               daemon=True, name="bgbias-claim")
    renewer.start()
    try:
        inputs = execute_step(folder, plan, step_id, device, processes, step_log)
    except KeyboardInterrupt:
        # An interruption is no death: the start is not counted against the step.
        _update_held(folder, step_id, claim, state="pending", claim=None,
                attempts=plan.steps[step_id].attempts - 1)
        step_log("interrupted: given back to the plan")
        raise
    except Exception as error:  # one step's failure (a diverged loss, a full disk) must not stop the rest
        message = str(error) if isinstance(error, BgbiasError) else f"{type(error).__name__}: {error}"
        _update_held(folder, step_id, claim, state="failed", claim=None, finished=time.time(), error=message,
                traceback=traceback.format_exc())
        outcome.failed[step_id] = message
        step_log(f"FAILED, going on with the others:\n{message}")
    else:
        if not _record_done(folder, step_id, claim, plan.steps[step_id], inputs):
            step_log("its plan changed while it ran (--extend): given back to the plan, to be done as it "
                     "asks now")
            return
        outcome.done.append(step_id)
        step_log("done")
        if plan.steps[step_id].kind == "run":  # the plan is read again only where a run's time was added
            progress = runs_progress(read_plan(folder) or plan, goals)
            if progress is not None:
                log(progress)
    finally:
        stop.set()
        renewer.join()


WHAT_A_STEP_DOES = ("kind", "needs", "shard", "run", "page")
"""The fields of a step that say what it makes: another value of any is another step."""


def _record_done(folder: Path, step_id: str, mine: Claim, ran: Step, inputs: dict[str, str]) -> bool:
    """Record the step this worker holds as done, unless the plan now asks it for something else than what
    it ran (``--extend`` added a profile or second masks meanwhile): then it goes back to pending, its start
    not counted, and False is returned. Another worker's takeover stands, as in :func:`_update_held`."""
    recorded = [True]

    def change(plan: Plan | None) -> Plan:
        plan = required_plan(plan, folder)
        step = plan.steps[step_id]
        if not _holds(step, mine):
            return plan
        if any(getattr(step, field) != getattr(ran, field) for field in WHAT_A_STEP_DOES):
            recorded[0] = False
            return with_step(plan, step_id, state="pending", claim=None, attempts=step.attempts - 1)
        return with_step(plan, step_id, state="done", claim=None, finished=time.time(), inputs=inputs)

    update_plan(folder, change)
    return recorded[0]


def _update_held(folder: Path, step_id: str, mine: Claim, **changes: object) -> None:
    """Change the step this worker holds (renew its claim, record its end), unless another worker has taken
    it over meanwhile (this one was thought dead): then the other's record stands."""
    def change(plan: Plan | None) -> Plan:
        plan = required_plan(plan, folder)
        return with_step(plan, step_id, **changes) if _holds(plan.steps[step_id], mine) else plan

    update_plan(folder, change)


def _holds(step: Step, mine: Claim) -> bool:
    """Whether ``step`` is still claimed by this worker's ``mine`` (not taken over meanwhile)."""
    return step.claim is not None and step.claim.token == mine.token


def _renew(folder: Path, step_id: str, claim: Claim, stop: threading.Event, every: float) -> None:
    while not stop.wait(every):
        _update_held(folder, step_id, claim, claim=claim.model_copy(update={"heartbeat": time.time()}))


def _started_on(folder: Path, device: str) -> str:
    """The device as ``--status`` shows it (:func:`_asked_device` with ``auto`` resolved), once this worker
    could start on it: an error it cannot start with is recorded in the plan (then raised), and a record of an
    earlier worker of this host that could not start on it is cleared."""
    asked = _asked_device(device)
    host = socket.gethostname()
    try:
        label = _asked_device(str(resolve_device(device)))
    except BgbiasError as error:
        record = UnstartedWorker(host=host, device=asked, error=str(error), at=time.time())
        update_plan(folder, lambda plan: _with_unstarted(folder, plan, host, asked, [record]))
        raise
    recorded = read_plan(folder)
    if recorded is not None and any((w.host, w.device) == (host, asked) for w in recorded.unstarted):
        update_plan(folder, lambda plan: _with_unstarted(folder, plan, host, asked, []))
    return label


def _with_unstarted(folder: Path, plan: Plan | None, host: str, device: str,
                    records: list[UnstartedWorker]) -> Plan:
    """``plan`` with ``records`` in place of its unstarted workers of ``host`` and ``device``."""
    plan = required_plan(plan, folder)
    kept = [w for w in plan.unstarted if (w.host, w.device) != (host, device)]
    return plan.model_copy(update={"unstarted": kept + records})


def _asked_device(device: str) -> str:
    """The device a worker was asked for, with the GPUs it was given (``cuda (GPU 1)``)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return device if visible is None or device == "cpu" else f"{device} (GPU {visible})"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bgbias.study.worker FOLDER GOAL... [options]``: a worker of the local executor
    (:mod:`bgbias.study.local`), which starts it; it stops when its parent does."""
    parser = argparse.ArgumentParser(prog="python -m bgbias.study.worker")
    parser.add_argument("folder", type=Path)
    parser.add_argument("goals", nargs="+")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--parent", type=int, default=None)
    parser.add_argument("--renew-every", type=float, default=RENEW_EVERY)
    parser.add_argument("--stale-after", type=float, default=STALE_AFTER)
    parser.add_argument("--poll-every", type=float, default=POLL_EVERY)
    options = parser.parse_args(argv)
    if options.parent is not None:
        _stop_with_parent(options.parent)
    timing = Timing(options.renew_every, options.stale_after, options.poll_every)
    try:
        work(options.folder, options.goals, device=options.device, threads=options.threads,
             processes=options.processes, log=lambda line: print(line, flush=True), timing=timing)
    except KeyboardInterrupt as interruption:
        return interruption_status(interruption)
    except BgbiasError as error:  # e.g. its device is missing: starting it again would not help
        print(f"error: {error}", flush=True)
        return CANNOT_WORK
    return 0


CANNOT_WORK = 2
"""Exit status of a worker stopped by an error it reported (the CLI's for a ``BgbiasError``), such as a
device it cannot start on: the local executor does not start it again."""


def _stop_with_parent(parent: int) -> None:
    """SIGTERM to this process when ``parent`` ends (Linux's parent-death signal, and a check that the parent
    had not already gone before it was set)."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the worker outlives a killed parent and finishes its step
        return
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


if __name__ == "__main__":
    raise SystemExit(main())
