"""A model's per-image state: what retrieval compares, as one or several named arrays of equal length.

Most methods keep one ``(N, D)`` embedding per image. Others keep more (AVSL: an embedding per backbone level
and a certainty per link), so the cache, the checks and the searches handle a mapping of names to arrays,
each with one row per image. A bare tensor is the state with the single array named ``embedding``; a model's
``embed`` and ``pairwise_distance`` see the state in the form the model returns it (bare or named).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import numpy as np

from bgbias.errors import BgbiasError, OptionError

EMBEDDING = "embedding"
"""The name of the single array of a model whose ``embed`` returns a bare tensor."""

A = TypeVar("A")


def named_arrays(state: A | Mapping[str, A]) -> dict[str, A]:
    """The state as a mapping of names to arrays (a bare array becomes ``{"embedding": array}``)."""
    if isinstance(state, Mapping):
        if not state:
            raise OptionError("a model's per-image state has no arrays", fix="return at least one array")
        return dict(state)
    return {EMBEDDING: state}


def model_form(arrays: Mapping[str, A]) -> A | dict[str, A]:
    """The named arrays in the form the model returned them: bare for the single ``embedding``."""
    if set(arrays) == {EMBEDDING}:
        return arrays[EMBEDDING]
    return dict(arrays)


def take_rows(arrays: Mapping[str, A], rows: Any) -> dict[str, A]:
    """Rows ``rows`` (a slice or an index array) of every array."""
    return {name: array[rows] for name, array in arrays.items()}


def state_length(arrays: Mapping[str, Any]) -> int:
    """The number of images the arrays describe, once each is known to have one row per image, at least one
    dimension and only finite numbers."""
    lengths = {name: (array.shape[0] if len(array.shape) else None) for name, array in arrays.items()}
    if None in lengths.values() or len(set(lengths.values())) != 1:
        raise OptionError(
            f"the per-image arrays must have one row per image each, got lengths {lengths}",
            fix="return arrays of shape (images, ...) with the same number of images",
        )
    for name, array in arrays.items():
        if not _finite(array):
            raise BgbiasError(
                f"the per-image array {name!r} contains NaN or infinite values, so no ranking of it means "
                "anything",
                fix="the model diverged or its checkpoint is damaged: evaluate an earlier checkpoint or "
                "retrain with a lower learning rate",
            )
    return next(iter(lengths.values()))


def _finite(array: Any) -> bool:
    """Whether every entry is finite: a finite sum says so in one fast pass (a NaN or an infinity makes it
    NaN or infinite); only a sum that overflowed is checked entry by entry."""
    if hasattr(array, "isfinite"):
        return bool(array.sum().isfinite()) or bool(array.isfinite().all())
    array = np.asarray(array)
    with np.errstate(over="ignore", invalid="ignore"):
        total = array.sum()
    return bool(np.isfinite(total)) or bool(np.isfinite(array).all())
