"""Multi-process training with torchrun (which sets RANK, WORLD_SIZE, LOCAL_RANK): one process per device,
DistributedDataParallel, rank 0 writes; NCCL on CUDA, gloo on the CPU. A single process costs nothing here.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch.distributed as td


@dataclass(frozen=True)
class Distributed:
    """This process's place in the run."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def from_environment() -> Distributed:
    """The process group described by torchrun's environment variables (a single process without them)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return Distributed()
    return Distributed(int(os.environ["RANK"]), world_size, int(os.environ.get("LOCAL_RANK", "0")))


_GROUPS_JOINED = itertools.count()


@contextlib.contextmanager
def process_group(dist: Distributed, device_type: str) -> Iterator[None]:
    """The process group for the block (nothing for a single process), destroyed on exit; one the caller
    initialised is used and left as it is.

    A group still held at exit (by a DistributedDataParallel wrapper, or a module that bound it at import)
    is torn down at interpreter shutdown, racing gloo's threads ("terminate called without an active
    exception"). So the block must drop its wrappers before it ends, and :func:`_import_before_group` runs.
    """
    if not dist.enabled:
        yield
        return

    if td.is_initialized():
        yield
        return
    _import_before_group()
    store, rank, world_size = next(td.rendezvous("env://"))
    # torch names every new default group "0" again, and torchrun's store outlives the group: a second
    # group in this process (a second ``train`` from Python) would read the first one's addresses from it.
    # Each group in the process gets keys of its own; every rank joins as often, so the prefixes agree.
    store = td.PrefixStore(f"bgbias-group-{next(_GROUPS_JOINED)}/", store)
    td.init_process_group("nccl" if device_type == "cuda" else "gloo", store=store, rank=rank,
                          world_size=world_size)
    try:
        yield
    finally:
        td.destroy_process_group()


def _import_before_group() -> None:
    """Import what DistributedDataParallel imports (``torch._dynamo`` and through it others) while no group
    exists: they bind ``group.WORLD`` as a default argument and would keep a group alive for good."""
    import torch._dynamo  # noqa: F401  (1.8 s: only a run with several processes pays it)


def broadcast(dist: Distributed, value: Any) -> Any:
    """Rank 0's ``value`` on every rank (any picklable object)."""
    if not dist.enabled:
        return value

    box = [value if dist.is_main else None]
    td.broadcast_object_list(box, src=0)
    return box[0]


def barrier(dist: Distributed) -> None:
    if dist.enabled:
        td.barrier()
