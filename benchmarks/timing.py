"""Wall time of one call on a device: CUDA work is waited for before the clock starts and stops."""

from __future__ import annotations

import time
from collections.abc import Callable


def synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(function: Callable[[], object], device) -> float:
    """Seconds ``function()`` takes on ``device``."""
    synchronize(device)
    start = time.perf_counter()
    function()
    synchronize(device)
    return time.perf_counter() - start
