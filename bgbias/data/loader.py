"""A DataLoader whose workers report an unreadable image as the project's error, not as a worker traceback.

torch re-raises an exception from a worker process by calling its class with the formatted traceback as the
only argument, so a ``BgbiasError`` arrives without its file and its fix, inside 30 lines of worker stack.
Here the worker catches the error while reading a sample and sends its parts (class, problem, file, fix) in
place of the batch; the main process raises the same error again, whole, so commands print the file and the
fix.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, default_collate

from bgbias import errors
from bgbias.errors import BgbiasError

FIND_UNREADABLE = (
    "`bgbias masks --dataset NAME` reads every image of a dataset and lists each one it cannot read in its "
    "manifest"
)
"""How a user finds all unreadable images at once (added to the fix of an error met while loading)."""


@dataclass(frozen=True)
class LoadFailure:
    """A ``BgbiasError`` in parts that pickle: what a worker sends back instead of a batch."""

    kind: str
    problem: str
    path: str | None
    fix: str | None

    @classmethod
    def of(cls, error: BgbiasError) -> LoadFailure:
        return cls(type(error).__name__, error.problem, error.path, error.fix)

    def error(self) -> BgbiasError:
        """The error again, of its own class where it is one of the project's, with how to find the others."""
        kind = getattr(errors, self.kind, BgbiasError)
        kind = kind if isinstance(kind, type) and issubclass(kind, BgbiasError) else BgbiasError
        fix = f"{self.fix}; {FIND_UNREADABLE}" if self.fix else FIND_UNREADABLE
        return kind(self.problem, path=self.path, fix=fix)


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
            return LoadFailure.of(error)


def _collate(samples: Sequence[Any]) -> Any:
    failure = next((sample for sample in samples if isinstance(sample, LoadFailure)), None)
    return failure if failure is not None else default_collate(samples)


class ImageLoader(DataLoader):
    """``torch.utils.data.DataLoader`` over a dataset of image samples (same arguments, no ``collate_fn``);
    a sample that cannot be read raises its ``BgbiasError`` in the iterating process, naming the file."""

    def __init__(self, dataset: Any, **options: Any):
        super().__init__(_Reporting(dataset), collate_fn=_collate, **options)

    def __iter__(self) -> Iterator[Any]:
        for batch in super().__iter__():
            if isinstance(batch, LoadFailure):
                raise batch.error()
            yield batch
