"""A DataLoader whose workers report an unreadable image as the project's error, not as a worker traceback:
torch re-raises a worker's exception by calling its class with the traceback text, so a ``BgbiasError`` would
lose its file and fix. The worker sends the error (it pickles whole) in place of the batch instead.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, default_collate

from bgbias.errors import BgbiasError
from bgbias.signals import sigterm_as_interrupt_in_worker

FIND_UNREADABLE = ("`bgbias masks --dataset NAME` reads every image of a dataset and lists each one it "
                   "cannot read in its manifest")
"""How a user finds all unreadable images at once (added to the fix of an error met while loading)."""


@dataclass(frozen=True)
class LoadFailure:
    """What a worker sends back instead of a batch: the error met while reading a sample."""

    error: BgbiasError

    def raise_error(self) -> None:
        """Raise the error again, with how to find every other unreadable image at once."""
        fix = f"{self.error.fix}; {FIND_UNREADABLE}" if self.error.fix else FIND_UNREADABLE
        raise type(self.error)(self.error.problem, path=self.error.path, fix=fix)


class _Reporting(torch.utils.data.Dataset):
    """``dataset`` with its errors turned into :class:`LoadFailure` samples."""

    def __init__(self, dataset: Any):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: Any) -> Any:
        try:
            return self.dataset[index]
        except BgbiasError as error:
            return LoadFailure(error)


def _collate(samples: Sequence[Any]) -> Any:
    failure = next((sample for sample in samples if isinstance(sample, LoadFailure)), None)
    return failure if failure is not None else default_collate(samples)


class ImageLoader(DataLoader):
    """``torch.utils.data.DataLoader`` over a dataset of image samples (same arguments, no ``collate_fn``);
    a sample that cannot be read raises its ``BgbiasError`` in the iterating process, naming the file. Its
    worker processes take SIGTERM as they take Ctrl-C (:func:`bgbias.signals.sigterm_as_interrupt_in_worker`)
    unless ``worker_init_fn`` is given."""

    def __init__(self, dataset: Any, **options: Any):
        options.setdefault("worker_init_fn", sigterm_as_interrupt_in_worker)
        super().__init__(_Reporting(dataset), collate_fn=_collate, **options)

    def __iter__(self) -> Iterator[Any]:
        for batch in super().__iter__():
            if isinstance(batch, LoadFailure):
                batch.raise_error()
            yield batch

    def close(self) -> None:
        """End the worker processes now: a persistent one alive when the interpreter exits can hang it."""
        iterator = getattr(self, "_iterator", None)
        self._iterator = None
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
