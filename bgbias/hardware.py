"""What the machine offers a run: its usable cores, and how many data-loader workers to start by default.

A loader worker decodes and crops images while the model computes. On a GPU that is free time, so every
process gets workers. On a CPU the model's own threads already use every core, and a worker takes cores from
them: on 2 cores a training epoch took 1.18× as long with 2 workers as with none (docs/benchmarks.md,
*Loader workers on 2 cores*), so small CPU machines decode in the main process. Workers never change a
result: batches and augmentations are keyed by seed, epoch and step, not by the worker that made them.
"""

from __future__ import annotations

import os

CPU_CORES_PER_WORKER = 4
"""On a CPU device, one loader worker per this many cores beyond the first four."""
MAX_WORKERS = 8


def usable_cores() -> int:
    """The cores this process may run on (its affinity under SLURM or taskset, else every core)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def processes_per_node() -> int:
    """How many training processes share this machine's cores: torchrun's ``LOCAL_WORLD_SIZE``, else 1."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


def default_loader_workers(device_type: str) -> int:
    """Loader workers for one process on ``device_type`` (``cpu`` or ``cuda``), from the cores it shares.

    CUDA: every core but one (the process's own), up to 8. CPU: none up to 4 cores, where the model needs
    them all; beyond, one per 4 cores past the first four, up to 8."""
    cores = max(1, usable_cores() // processes_per_node())
    if device_type == "cuda":
        return min(MAX_WORKERS, max(1, cores - 1))
    return min(MAX_WORKERS, max(0, (cores - 4) // CPU_CORES_PER_WORKER))
