"""``--executor local``: the study's workers on this machine, one per device (or several on a CPU, its cores
split between them), each a child process with its own log in ``<study>/logs/`` (one worker on one device
runs in this process). This process prints each step as it starts and ends, starts a worker again that
died, and stops them when it is stopped; a worker whose parent dies stops too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from bgbias.engine.device import cuda_devices, missing_cuda
from bgbias.errors import BgbiasError, OptionError, given
from bgbias.hardware import usable_cores
from bgbias.study.ledger import Plan, read_plan
from bgbias.study.worker import CANNOT_WORK, DEFAULT_TIMING, Timing, runs_progress, work

RESTARTS = 3
"""Times a worker that died is started again before its slot is left empty."""


@dataclass(frozen=True)
class Slot:
    """Where one worker runs: its ``device`` setting, the GPUs it sees (``CUDA_VISIBLE_DEVICES``; None: as
    this process), its CPU threads, and how many processes train each of its runs (torchrun)."""

    device: str
    gpus: str | None = None
    threads: int | None = None
    processes: int = 1


def local_slots(devices: str = "auto", workers: int | None = None, gpus_per_run: int = 1,
                threads: int | None = None) -> list[Slot]:
    """The workers of the options ``devices``, ``workers``, ``gpus_per_run`` and ``threads`` (docs/study.md).
    ``threads`` defaults to the cores split between the workers; CPU kernels sum in an order that depends on
    their thread count, so runs give the same bits under any number of workers only with the same ``threads``.
    """
    for name, value in (("workers", workers), ("threads", threads), ("gpus_per_run", gpus_per_run)):
        if value is not None and value < 1:
            raise OptionError(f"{given(value)} is less than 1", fix=f"pass {given(1)} or more",
                              parameter=name)
    gpus = _gpus(devices)
    if not gpus:
        count = workers or 1
        if threads is None and count > 1:
            threads = max(1, usable_cores() // count)
        device = "cpu" if devices == "cpu" else "auto"
        return [Slot(device, None, threads, gpus_per_run) for _ in range(count)]
    if workers is not None:
        raise OptionError("--workers sets CPU workers; on GPUs a study runs one worker per device",
                          fix="leave --workers out, or pass --devices cpu")
    if len(gpus) % gpus_per_run:
        raise OptionError(f"{len(gpus)} GPU(s) cannot be split into groups of {gpus_per_run}",
                          fix="name a multiple of --gpus-per-run devices with --devices cuda:0,1,…")
    groups = [gpus[start:start + gpus_per_run] for start in range(0, len(gpus), gpus_per_run)]
    threads = threads or max(1, usable_cores() // len(groups))
    device = "auto" if devices == "auto" else "cuda"
    return [Slot(device, ",".join(group), threads, gpus_per_run) for group in groups]


def _gpus(devices: str) -> list[str]:
    """The GPU indices ``--devices`` names (``auto``: every visible one), none for the CPU."""
    if devices == "cpu":
        return []
    if devices == "auto":
        return [str(index) for index in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    names = [name.strip() for name in devices.split(",") if name.strip()]
    indices = [name.removeprefix("cuda:") for name in names]
    valid = all(name.startswith("cuda:") and index.isdigit()
                for name, index in zip(names, indices, strict=True))
    if not names or not valid:
        raise OptionError(f"--devices {devices!r} is not auto, cpu or a list like cuda:0,cuda:1",
                          fix="pass --devices auto, cpu, or cuda:0,1,… (the GPUs to use)")
    # A GPU this machine lacks is refused before the study writes anything: a worker on it would only fail
    # once started.
    for index in indices:
        missing = missing_cuda(int(index))
        if missing is not None:
            present = ",".join(cuda_devices())
            other = f", or --devices {present}" if present else ""
            raise OptionError(f"--devices {devices}: {missing}", fix=f"pass --devices cpu (or auto){other}")
    return indices


def run_local(folder: Path, goals: Sequence[str], slots: Sequence[Slot], *,
              log: Callable[[str], None] = print, timing: Timing = DEFAULT_TIMING) -> None:
    """Work on the plan's ``goals`` with a worker per slot until nothing is left that they may do."""
    if len(slots) == 1 and "," not in (slots[0].gpus or ""):  # one worker, one device: in this process
        slot = slots[0]
        device = slot.device if slot.gpus is None or slot.device == "auto" else f"cuda:{slot.gpus}"
        work(folder, goals, device=device, threads=slot.threads, processes=slot.processes, log=log,
             timing=timing)
        return
    logs = folder / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    children = {number: _start(folder, goals, slot, number, logs, timing)
                for number, slot in enumerate(slots)}
    restarts = dict.fromkeys(children, 0)
    lost: dict[int, str] = {}  # the slots left empty: why
    plan = read_plan(folder)
    shown = {} if plan is None else {step_id: step.state for step_id, step in plan.steps.items()}
    try:
        while children:
            time.sleep(min(1.0, timing.poll_every))
            _show_changes(read_plan(folder), goals, shown, log)
            for number, child in list(children.items()):
                status = child.poll()
                if status is None:
                    continue
                del children[number]
                if status == 0:
                    continue
                worker_log = logs / f"worker-{number}.log"
                if status == CANNOT_WORK or restarts[number] >= RESTARTS:
                    lost[number] = _last_error(worker_log) if status == CANNOT_WORK else (
                        f"it ended with status {status} {RESTARTS + 1} times")
                    log(f"worker {number} ({_slot_label(slots[number])}) stopped: {lost[number]}; its slot "
                        f"stays empty (see {worker_log})")
                    continue
                restarts[number] += 1
                log(f"worker {number} ended with status {status}: started again ({worker_log})")
                children[number] = _start(folder, goals, slots[number], number, logs, timing)
        _show_changes(read_plan(folder), goals, shown, log)
    finally:
        _stop(children.values())
    if len(lost) == len(slots):
        reasons = "; ".join(f"worker {number} ({_slot_label(slots[number])}): {why}"
                            for number, why in sorted(lost.items()))
        raise BgbiasError(f"no worker could start or keep working: {reasons}", path=logs,
                          fix="pass --devices that this machine has (or cpu), then run the command again; "
                              "`bgbias study --status` (same options) shows what each worker recorded")


def _slot_label(slot: Slot) -> str:
    return slot.device if slot.gpus is None else f"{slot.device}, GPU {slot.gpus}"


def _last_error(worker_log: Path) -> str:
    """The error a worker printed last (``error: …`` and its lines), or a pointer to its log."""
    try:
        text = worker_log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "an error (its log cannot be read)"
    start = text.rfind("error: ")
    return text[start + len("error: "):].strip().splitlines()[0] if start >= 0 else "an error (see its log)"


def _start(folder: Path, goals: Sequence[str], slot: Slot, number: int, logs: Path,
           timing: Timing) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "bgbias.study.worker", str(folder), *goals, "--device", slot.device,
               "--processes", str(slot.processes), "--parent", str(os.getpid()),
               "--renew-every", str(timing.renew_every), "--stale-after", str(timing.stale_after),
               "--poll-every", str(timing.poll_every)]
    env = dict(os.environ)
    if slot.threads is not None:
        command += ["--threads", str(slot.threads)]
        env["OMP_NUM_THREADS"] = str(slot.threads)
    if slot.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = slot.gpus
    with open(logs / f"worker-{number}.log", "ab") as output:
        return subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)


def _stop(children: Iterable[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to each worker still running (each gives its step back), then wait for them."""
    running = [child for child in children if child.poll() is None]
    for child in running:
        child.send_signal(signal.SIGTERM)
    for child in running:
        try:
            child.wait(timeout=120)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _show_changes(plan: Plan | None, goals: Sequence[str], shown: dict[str, str],
                  log: Callable[[str], None]) -> None:
    """Log each step whose state changed since the last look, and the runs' time left after a run is done."""
    if plan is None:
        return
    run_done = False
    for step_id, step in plan.steps.items():
        if shown.get(step_id, "pending") != step.state:
            where = f" on {step.device} ({step.host})" if step.state == "running" else ""
            error = f": {step.error.splitlines()[0]}" if step.state == "failed" and step.error else ""
            log(f"[{step_id}] {step.state}{where}{error}")
            run_done = run_done or (step.kind == "run" and step.state == "done")
        shown[step_id] = step.state
    progress = runs_progress(plan, goals) if run_done else None
    if progress is not None:
        log(progress)
