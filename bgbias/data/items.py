"""What every dataset layout produces: a sorted list of ``Item``s and an ordered class partition, behind one
small base class."""

from __future__ import annotations

import hashlib
import os
import posixpath
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, ClassVar

from bgbias.data.geometry import PAPER_EVAL_GEOMETRY, PAPER_TRAIN_GEOMETRY, EvalGeometry, TrainGeometry
from bgbias.data.layout import locate_root, require_files
from bgbias.errors import DatasetError
from bgbias.options import DEFAULT_MASK_MODEL
from bgbias.paths import data_root, leaves_folder, located_key, masks_root

if TYPE_CHECKING:
    from bgbias.data.memory import InMemoryImage


@dataclass(frozen=True)
class Item:
    """One image of a dataset. ``id`` is its posix path relative to the dataset root (stable across machines,
    a key in manifests); ``label`` the dataset's own class id; ``ground_truth_mask`` the shipped object mask,
    if any; ``saliency_mask`` the image's own saliency mask where it came with one (else the masks folder's:
    :func:`mask_source`). ``image`` is a file or, for a dataset's samples, an ``InMemoryImage``.
    """

    id: str
    image: Path | InMemoryImage
    label: int
    relpath: PurePosixPath
    ground_truth_mask: Path | None = None
    saliency_mask: Path | InMemoryImage | None = None


def make_item(root: Path, relpath: str, label: int, ground_truth_mask: Path | None = None) -> Item:
    """An ``Item`` for ``relpath`` (posix, relative to the absolute ``root``)."""
    posix = PurePosixPath(relpath)
    return Item(id=str(posix), image=Path(root, posix), label=label, relpath=posix,
                ground_truth_mask=ground_truth_mask)


def mask_path(item: Item, masks_dir: Path) -> Path:
    """Where the saliency mask of ``item`` lives: its relative path mirrored under ``masks_dir``, as a PNG."""
    return Path(masks_dir, mask_relpath(item))


def mask_source(item: Item, masks_dir: Path) -> Path | InMemoryImage:
    """Where the saliency mask of ``item`` is read from: its own mask where it came with one, else its place
    in ``masks_dir`` (:func:`mask_path`)."""
    return item.saliency_mask if item.saliency_mask is not None else mask_path(item, masks_dir)


def mask_relpath(item: Item) -> str:
    """``item.id`` with its suffix replaced by ``.png`` (string operations: fast on 100k+ items)."""
    return posixpath.splitext(item.id)[0] + ".png"


@dataclass(frozen=True)
class Catalog:
    """Everything a layout's index says: the items, the ordered class partition (the fixed split trains on
    ``trainval_classes[:val_start]``) and the names the dataset gives its classes, by label (may be empty)."""

    items: list[Item]
    trainval_classes: list[int]
    test_classes: list[int]
    val_start: int
    class_names: Mapping[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class KnownSize:
    """A published benchmark's size as its papers give it, its fixed split cut by class id (train ≤
    ``last_train_class`` < val ≤ ``last_trainval_class`` < test): what a study's dry run prices it from
    before it is downloaded (docs/study.md, *--dry-run*)."""

    images: int
    classes: int
    test_images: int
    last_train_class: int
    last_trainval_class: int


def shown_class(name: str | None, label: int | str) -> str:
    """A class as reports show it: its name (:meth:`Dataset.class_names`), and its label where the two differ
    (a class without a name by its label alone)."""
    if name is None or name == str(label):
        return str(label)
    return f"{name} ({label})"


class Dataset(ABC):
    """A dataset in its official layout under ``root``, registered with ``@register_dataset("name")``; its
    class attributes are everything else bgbias knows about it. The constructor only checks the root holds
    the index file; the index is read, and every listed image checked, on the first call that needs it.
    """

    name: ClassVar[str]
    index_file: ClassVar[str]
    """The file whose presence marks the dataset root ('' for layouts without one)."""
    obtain: ClassVar[str]
    """How a user gets the dataset into this layout (the fix in error messages)."""
    default_folder: ClassVar[str | None] = None
    """The dataset's folder under the data root when no root is given (``None``: it has no usual place)."""
    published: ClassVar[bool] = False
    """True for a published benchmark (CUB, Cars196, SOP): every copy of it is the same dataset, so its
    default output folders are named by the dataset alone, wherever its root is."""
    eval_geometry: ClassVar[EvalGeometry] = PAPER_EVAL_GEOMETRY
    """Resize and centre crop of evaluation, corrupted sets and explanations."""
    train_geometry: ClassVar[TrainGeometry] = PAPER_TRAIN_GEOMETRY
    """Resize and random crop of training, unless the configuration's ``data`` section changes them."""
    protocol: ClassVar[str] = "paper"
    """The training protocol: ``configs/protocols/<protocol>.json`` is the configuration's first layer."""
    known_size: ClassVar[KnownSize | None] = None
    """A published benchmark's size, for pricing a study before the dataset is there (``None``: unknown)."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = locate_root(Path(root).expanduser().resolve(), self.index_file, self.obtain)
        self._catalog: Catalog | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.root)!r})"

    def items(self) -> list[Item]:
        """All images, sorted by id."""
        return self._loaded().items

    @property
    def key(self) -> str:
        """The name of this dataset's default output folders (``masks/<key>``, ``corrupted/<key>``, …): the
        dataset's name for a published benchmark or one in its usual folder, else with the root's folder name
        and a digest of its path, so two user datasets never overwrite each other's outputs."""
        return folder_key(type(self), self.root)

    def identity(self) -> str:
        """sha256 of the image ids and labels: runs record it, so a model is never scored on another dataset
        than it was trained on without saying so."""
        return items_digest(self.items())

    def trainval_classes(self) -> list[int]:
        """The classes used for training and validation, in the order the splits cut them."""
        return self._loaded().trainval_classes

    def test_classes(self) -> list[int]:
        """The held-out classes, sorted."""
        return self._loaded().test_classes

    def class_names(self) -> dict[int, str]:
        """Every class's name as the dataset gives it (else its label), by label: what reports show."""
        catalog = self._loaded()
        labels = sorted({*catalog.trainval_classes, *catalog.test_classes})
        return {label: catalog.class_names.get(label, str(label)) for label in labels}

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
            check_inside(items, self.root / self.index_file)
            check_unique_mask_paths(items, self.root)
            require_files(
                [item.image for item in items if isinstance(item.image, Path)],
                "images listed in the index",
                self.root / self.index_file,
                fix="re-extract the dataset archive completely into the dataset folder, or fix the index",
            )
            self._catalog = replace(catalog, items=items)
        return self._catalog


def folder_key(kind: type[Dataset], root: Path) -> str:
    """:attr:`Dataset.key` of a dataset of class ``kind`` at ``root`` (resolved), before it exists."""
    folder = kind.default_folder
    usual = None if folder is None else (data_root() / folder).expanduser().resolve()
    at_default = root == usual
    return kind.name if kind.published or at_default else located_key(kind.name, root)


def default_masks_dir(dataset: Dataset, model: str = DEFAULT_MASK_MODEL) -> Path:
    """Where ``bgbias masks`` writes the dataset's masks of ``model`` by default (:func:`model_masks_dir`);
    every command reads the default model's from there."""
    return model_masks_dir(masks_root() / dataset.key, model)


def model_masks_dir(default: Path, model: str) -> Path:
    """A folder per mask model, so that two models' masks never meet: the default model's in ``default``
    (``masks/<dataset key>``), another's (or the shipped ground truth's) beside it, ``<default>-<model>``."""
    return default if model == DEFAULT_MASK_MODEL else default.with_name(f"{default.name}-{model}")


def items_digest(items: Sequence[Item]) -> str:
    """sha256 over the ids and labels of ``items`` in their order."""
    digest = hashlib.sha256()
    for item in items:
        digest.update(f"{item.id}\t{item.label}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def check_inside(items: Sequence[Item], index: Path) -> None:
    """No item whose id leads out of the dataset's folder: its mask and renders, named by it, would land
    outside their folders; a ``DatasetError`` naming ``index``."""
    for item in items:
        reason = leaves_folder(item.id)
        if reason is not None:
            raise DatasetError(f"the index names the image {item.id!r}, which is outside the dataset's "
                               f"folder ({reason}): its masks and renders would be written outside theirs",
                               path=index, fix="list each image by its path inside the dataset's folder")


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
