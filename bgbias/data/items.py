"""What every dataset layout produces: a sorted list of ``Item``s and an ordered class partition, behind one
small base class."""

from __future__ import annotations

import os
import posixpath
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import ClassVar

from bgbias.data.layout import locate_root, require_files
from bgbias.errors import DatasetError


@dataclass(frozen=True)
class Item:
    """One image of a dataset.

    ``id`` is the image path relative to the dataset root as a posix string, so it is stable across machines
    and usable as a key in manifests; ``relpath`` is the same path as a ``PurePosixPath``. ``label`` is the
    dataset's own class id. ``ground_truth_mask`` is an absolute path where the dataset ships object masks,
    else ``None``.
    """

    id: str
    image: Path
    label: int
    relpath: PurePosixPath
    ground_truth_mask: Path | None = None


def make_item(root: Path, relpath: str, label: int, ground_truth_mask: Path | None = None) -> Item:
    """An ``Item`` for ``relpath`` (posix, relative to the absolute ``root``)."""
    posix = PurePosixPath(relpath)
    return Item(
        id=str(posix),
        image=Path(root, posix),
        label=label,
        relpath=posix,
        ground_truth_mask=ground_truth_mask,
    )


def mask_path(item: Item, masks_dir: Path) -> Path:
    """Where the saliency mask of ``item`` lives: its relative path mirrored under ``masks_dir``, as a PNG."""
    return Path(masks_dir, mask_relpath(item))


def mask_relpath(item: Item) -> str:
    """``item.id`` with its suffix replaced by ``.png`` (string operations: fast on 100k+ items)."""
    return posixpath.splitext(item.id)[0] + ".png"


@dataclass(frozen=True)
class Catalog:
    """Everything a layout's index says: the items and the ordered class partition.

    The fixed split trains on ``trainval_classes[:val_start]`` and validates on the rest of trainval.
    """

    items: list[Item]
    trainval_classes: list[int]
    test_classes: list[int]
    val_start: int


class Dataset(ABC):
    """A dataset in its official layout under ``root``.

    The constructor only checks that the root holds the layout's index file; the index is read, and every
    listed image checked on disk, on the first call that needs it, then kept.
    """

    name: ClassVar[str]
    index_file: ClassVar[str]
    """The file whose presence marks the dataset root ('' for layouts without one)."""
    obtain: ClassVar[str]
    """How a user gets the dataset into this layout (the fix in error messages)."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = locate_root(Path(root).expanduser().resolve(), self.index_file, self.obtain)
        self._catalog: Catalog | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.root)!r})"

    def items(self) -> list[Item]:
        """All images, sorted by id."""
        return self._loaded().items

    def trainval_classes(self) -> list[int]:
        """The classes used for training and validation, in the order the splits cut them."""
        return self._loaded().trainval_classes

    def test_classes(self) -> list[int]:
        """The held-out classes, sorted."""
        return self._loaded().test_classes

    def fixed_val_start(self) -> int:
        """Index into ``trainval_classes()`` where the fixed split's validation classes begin."""
        return self._loaded().val_start

    @abstractmethod
    def _read_catalog(self) -> Catalog:
        """Parse the layout's index; the caller sorts the items and checks the images exist."""

    def _loaded(self) -> Catalog:
        if self._catalog is None:
            catalog = self._read_catalog()
            items = sorted(catalog.items, key=lambda item: item.id)
            check_unique_mask_paths(items, self.root)
            require_files(
                [item.image for item in items],
                "images listed in the index",
                self.root / self.index_file,
                fix="re-extract the dataset archive completely into the dataset folder, or fix the index",
            )
            self._catalog = Catalog(items, catalog.trainval_classes, catalog.test_classes, catalog.val_start)
        return self._catalog


def check_unique_mask_paths(items: Sequence[Item], root: Path) -> None:
    """No two images may share an id or a saliency-mask path (``a.jpg`` and ``a.png`` in one folder would)."""
    seen: dict[str, str] = {}
    for item in items:
        key = mask_relpath(item)
        if key in seen:
            other = seen[key]
            problem = (
                f"image {item.id} is listed twice"
                if other == item.id
                else f"images {other} and {item.id} would share the mask path {key}"
            )
            raise DatasetError(
                problem, path=root / item.id, fix="remove the duplicate entry, or rename one image"
            )
        seen[key] = item.id
