"""Mixed precision for the networks alone: bfloat16 (or float16) autocast inside backbones and outside
models, float32 for everything a method computes from their outputs.

A method's head, distances and loss are cheap and where 8 bits of mantissa hurt: the multi-similarity loss
weighs pairs by exp(50·(s − λ)), so a bfloat16 similarity moves a pair's weight by up to ~20 %. So the
precision is set as a context (:func:`network_precision`) and applied only where a network runs
(:func:`network_autocast`), whose outputs are handed on in float32.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch

_NETWORK_DTYPE: ContextVar[torch.dtype | None] = ContextVar("bgbias_network_dtype", default=None)


@contextmanager
def network_precision(dtype: torch.dtype | None) -> Iterator[None]:
    """Run the networks called inside in ``dtype`` autocast (None: float32)."""
    token = _NETWORK_DTYPE.set(dtype)
    try:
        yield
    finally:
        _NETWORK_DTYPE.reset(token)


@contextmanager
def network_autocast(device_type: str) -> Iterator[None]:
    """Autocast to the dtype :func:`network_precision` set around this call, if any: where a network runs."""
    dtype = _NETWORK_DTYPE.get()
    if dtype is None:
        yield
        return
    with torch.autocast(device_type=device_type, dtype=dtype):
        yield
