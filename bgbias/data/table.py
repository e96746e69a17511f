"""A dataset of one's own given as a table: rows of (image, label[, mask]), columns of such a table (a
mapping or a pandas DataFrame), a CSV file, or a torch ``Dataset`` whose samples are (image, label[, mask]).

Classes are the labels' distinct values in sorted order, each named by its label; split as a folder dataset
(:mod:`bgbias.data.folder`). A row's mask is that image's saliency mask; without one, masks come from a masks
folder. On the command line, ``--dataset table --root images.csv`` (columns ``path`` or ``image``, ``label``,
optionally ``mask``; paths relative to the CSV's folder).
"""

from __future__ import annotations

import csv
import hashlib
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from bgbias.data.folder import folder_split_sizes
from bgbias.data.items import Catalog, Dataset, Item, make_item
from bgbias.data.memory import InMemoryImage
from bgbias.data.registry import register_dataset
from bgbias.errors import DatasetError, OptionError

PLAIN_INTEGER = re.compile(r"-?[1-9][0-9]*|0")
"""An integer as ``str(int)`` writes it: no sign but ``-``, no leading zero, no space, so no two such texts
name one number."""

IMAGE_COLUMNS = ("path", "image")
"""A table's image column, by either name."""


@register_dataset("table")
class ImageTable(Dataset):
    """The rows of a table (:func:`image_table` builds one from any of the forms above)."""

    index_file = ""
    obtain = ("give a CSV file with the columns path,label[,mask] as the dataset's root, or rows of "
              "(path, label[, mask]) in Python")
    default_folder = None

    def __init__(self, root: str | os.PathLike[str]):
        path = Path(root).expanduser().resolve()
        if not path.is_file():
            raise DatasetError("the table dataset's root must be a CSV file", path=path, fix=self.obtain)
        self.csv = path
        self.rows: list[tuple[Any, Any, Any]] | None = None
        self.root = path.parent
        self._catalog: Catalog | None = None

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[Any, Any, Any]], root: Path) -> ImageTable:
        """A table of ``rows`` of (image, label, mask or None); relative paths are relative to ``root``.
        An image or mask may be a path or an :class:`InMemoryImage`."""
        table = cls.__new__(cls)
        table.csv, table.rows, table.root, table._catalog = None, list(rows), root.resolve(), None
        return table

    @property
    def key(self) -> str:
        """``table-`` and a digest of the root and the images' ids and labels: two tables never share a
        masks or corrupted-sets folder."""
        identity = self.identity()  # reads the rows first, which settles the root
        digest = hashlib.sha256(f"{self.root}\n{identity}".encode("utf-8", "surrogateescape"))
        return f"table-{digest.hexdigest()[:12]}"

    def _read_catalog(self) -> Catalog:
        rows = self.rows if self.rows is not None else _csv_rows(self.csv)
        if not rows:
            raise DatasetError("the table has no rows", path=self.csv, fix=self.obtain)
        class_of = _class_ids([label for _, label, _ in rows], self.csv)
        paths = [image for image, _, _ in rows]
        files = [_joined(self.root, path) for path in paths if not isinstance(path, InMemoryImage)]
        common = Path(os.path.commonpath([file.parent for file in files])) if files else self.root
        items = [_item(image, class_of[_label_key(label)], mask, common, self.root, index, len(rows))
                 for index, (image, label, mask) in enumerate(rows)]
        self.root = common
        classes = sorted(set(class_of.values()))
        trainval, train = folder_split_sizes(len(classes))
        names = {class_id: str(label) for label, class_id in class_of.items()}
        return Catalog(items, classes[:trainval], classes[trainval:], train, names)


def image_table(data: Any, root: str | os.PathLike[str] | None = None) -> ImageTable:
    """``data`` as a table dataset: rows of (path, label[, mask]), a mapping of columns (``path`` or
    ``image``, ``label``, optionally ``mask``; a pandas DataFrame is one), or a torch ``Dataset`` (any
    sequence with ``len``) of (image, label[, mask]) samples. Relative paths are relative to ``root``
    (default the working folder)."""
    base = Path(root) if root is not None else Path.cwd()
    if isinstance(data, Mapping) or _is_data_frame(data):
        return ImageTable.from_rows(_column_rows(data), base)
    if _is_torch_dataset(data):
        return ImageTable.from_rows(_sample_rows(data), base)
    if isinstance(data, str | bytes | os.PathLike) or not isinstance(data, Sequence):
        raise OptionError(f"cannot read images from a {type(data).__name__}",
                          fix="pass a dataset name, rows of (path, label[, mask]), a table with path and "
                              "label columns, or a torch Dataset of (image, label[, mask]) samples")
    return ImageTable.from_rows([_row(row, index) for index, row in enumerate(data)], base)


# ------------------------------------------------------------------------------------------------ the forms
def _row(row: Any, index: int) -> tuple[Any, Any, Any]:
    if isinstance(row, str | bytes) or not isinstance(row, Sequence) or len(row) not in (2, 3):
        raise OptionError(f"row {index} is {row!r}, not (path, label) or (path, label, mask)",
                          fix="give every row as (path, label) or (path, label, mask path)")
    image, label, *mask = row
    mask = [value for value in mask if value is not None and value != ""]
    for what, value in (("image", image), *(("mask", m) for m in mask)):
        if not isinstance(value, str | os.PathLike):
            raise OptionError(f"row {index}'s {what} is a {type(value).__name__}, not a path",
                              fix="give file paths in rows; images in memory come as a torch Dataset")
    return Path(image), label, Path(mask[0]) if mask else None


def _column_rows(table: Any) -> list[tuple[Any, Any, Any]]:
    columns = list(table.keys()) if isinstance(table, Mapping) else list(table.columns)
    image_column = next((name for name in IMAGE_COLUMNS if name in columns), None)
    if image_column is None or "label" not in columns:
        raise OptionError(f"the table's columns are {columns}; it needs {' or '.join(IMAGE_COLUMNS)} and "
                          "label", fix="name the image column path (or image) and the class column label")
    images, labels = list(table[image_column]), list(table["label"])
    masks = list(table["mask"]) if "mask" in columns else [None] * len(images)
    if not len(images) == len(labels) == len(masks):
        raise OptionError(f"the table's columns differ in length ({len(images)} images, {len(labels)} "
                          f"labels, {len(masks)} masks)", fix="give every column one entry per image")
    return [_row((image, label, mask), index) for index, (image, label, mask)
            in enumerate(zip(images, labels, masks, strict=True))]


def _sample_rows(samples: Any) -> list[tuple[Any, Any, Any]]:
    """Rows of a dataset's samples, read lazily: only the labels are read now (its ``targets`` where it has
    them, as torchvision's datasets do; else each sample)."""
    count = len(samples)
    if count == 0:
        raise OptionError("the dataset has no samples", fix="pass a dataset with images in it")
    first = _sample(samples, 0)
    targets = getattr(samples, "targets", None)
    labels = list(targets) if targets is not None and len(targets) == count else [
        _sample(samples, index)[1] for index in range(count)]
    return [(InMemoryImage(samples, index, 0, f"dataset[{index}]"), label,
             InMemoryImage(samples, index, 2, f"dataset[{index}] (mask)") if len(first) == 3 else None)
            for index, label in enumerate(labels)]


def _sample(samples: Any, index: int) -> Sequence[Any]:
    """``samples[index]``, which must be (image, label[, mask]); an ``OptionError`` naming ``dataset[index]``
    for whatever the dataset raises or returns instead."""
    fix = "make __getitem__ return (image, label) or (image, label, mask) for every index below len()"
    try:
        sample = samples[index]
    except Exception as exc:  # whatever the user's dataset raises
        raise OptionError(f"reading dataset[{index}] raised {type(exc).__name__}: {exc}", fix=fix) from exc
    if not isinstance(sample, Sequence) or isinstance(sample, str | bytes) or len(sample) not in (2, 3):
        shape = f"a {type(sample).__name__} of {len(sample)}" if isinstance(sample, Sequence) else \
            f"a {type(sample).__name__}"
        raise OptionError(f"dataset[{index}] is {shape}, not (image, label[, mask])", fix=fix)
    return sample


def _csv_rows(path: Path) -> list[tuple[Any, Any, Any]]:
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:  # a spreadsheet's byte order mark
            reader = csv.DictReader(handle)
            records, names = list(reader), reader.fieldnames or []
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DatasetError(f"the table cannot be read ({exc})", path=path, fix=ImageTable.obtain) from exc
    columns = {"label", "mask", *IMAGE_COLUMNS}
    try:
        return _column_rows({name: [record.get(name) for record in records]
                             for name in names if name in columns})
    except OptionError as err:
        raise DatasetError(err.problem, path=path, fix=err.fix) from None


# ------------------------------------------------------------------------------------------------ helpers
def _item(image: Any, label: int, mask: Any, common: Path, root: Path, index: int, count: int) -> Item:
    if isinstance(image, InMemoryImage):
        width = max(6, len(str(count - 1)))
        return Item(id=f"{index:0{width}d}", image=image, label=label,
                    relpath=PurePosixPath(f"{index:0{width}d}"), saliency_mask=mask)
    path = _joined(root, image)
    item = make_item(common, path.relative_to(common).as_posix(), label)
    if mask is not None and not isinstance(mask, InMemoryImage):
        mask = _joined(root, mask)
    return Item(item.id, path, label, item.relpath, saliency_mask=mask)


def _joined(root: Path, path: str | os.PathLike[str]) -> Path:
    """A row's path under ``root``, its ``..`` parts resolved (as text: links are not followed): the image's
    id is its path below the rows' common folder, and names its mask and renders in their folders, which a
    ``..`` kept in it would lead out of."""
    return Path(os.path.normpath(Path(root, path)))


def _label_key(label: Any) -> Any:
    """A label as a plain hashable value (a 0-d tensor or numpy scalar as its number)."""
    return label.item() if hasattr(label, "item") and getattr(label, "ndim", 0) == 0 else label


def _class_ids(labels: Sequence[Any], source: Path | None) -> dict[Any, int]:
    """Each distinct label's class id: integer labels keep their value, as do a CSV's when every one is an
    integer written plainly (``7``, ``-3``); any others are numbered in sorted order. A CSV's labels are
    text, so ``7`` and ``007`` stay two classes."""
    values = [_label_key(label) for label in labels]
    try:
        distinct = set(values)
    except TypeError as exc:
        raise OptionError(f"a label is not hashable ({exc})",
                          fix="give labels as ints or strings, one per image") from None
    if all(isinstance(value, int) and not isinstance(value, bool) for value in distinct):
        return {value: value for value in distinct}
    if source and all(isinstance(value, str) and PLAIN_INTEGER.fullmatch(value) for value in distinct):
        return {value: int(value) for value in distinct}
    return {value: index for index, value in enumerate(sorted(distinct, key=str))}


def _is_data_frame(data: Any) -> bool:
    return type(data).__name__ == "DataFrame" and hasattr(data, "columns")


def _is_torch_dataset(data: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(data, torch.utils.data.Dataset)
