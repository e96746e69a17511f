"""Multi-process training with torchrun: one process per device, DistributedDataParallel, rank 0 writes.

``torchrun --nproc_per_node N -m bgbias train ...`` sets RANK, WORLD_SIZE and LOCAL_RANK; without them the
run is a single process and nothing here costs anything. The backend is NCCL on CUDA and gloo on the CPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any


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


def init_process_group(dist: Distributed, device_type: str) -> None:
    """Join the process group (no-op for a single process)."""
    if not dist.enabled:
        return
    import torch.distributed as td

    if not td.is_initialized():
        td.init_process_group("nccl" if device_type == "cuda" else "gloo")


def destroy_process_group(dist: Distributed) -> None:
    if not dist.enabled:
        return
    import torch.distributed as td

    if td.is_initialized():
        td.destroy_process_group()


def broadcast(dist: Distributed, value: Any) -> Any:
    """Rank 0's ``value`` on every rank (any picklable object)."""
    if not dist.enabled:
        return value
    import torch.distributed as td

    box = [value if dist.is_main else None]
    td.broadcast_object_list(box, src=0)
    return box[0]


def barrier(dist: Distributed) -> None:
    if dist.enabled:
        import torch.distributed as td

        td.barrier()
