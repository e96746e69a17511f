"""Datasets by name: ``@register_dataset("name")`` on a :class:`~bgbias.data.items.Dataset` layout; here, how
to open one and what it holds. Adding a dataset takes a module with its decorated layout class, and the
module's name in ``DATASETS``' list (whose order ``--dataset`` lists them in).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from bgbias.data.items import Dataset
from bgbias.data.splits import split_classes
from bgbias.errors import OptionError
from bgbias.paths import data_root
from bgbias.registry import Registry

DATASETS: Registry[type[Dataset]] = Registry(
    "dataset",
    ("bgbias.data.cub", "bgbias.data.cars", "bgbias.data.sop", "bgbias.data.folder", "bgbias.data.table",
     "bgbias.data.bench"),
    name_attribute="name",
)

D = TypeVar("D", bound="type[Dataset]")


def register_dataset(name: str) -> Callable[[D], D]:
    """Class decorator: make a Dataset layout available as ``name`` (and set its ``name``)."""
    return DATASETS.register(name)


def dataset_names() -> tuple[str, ...]:
    """Every registered dataset, in registration order (the order ``--dataset`` lists them)."""
    return DATASETS.names()


def dataset_class(name: str) -> type[Dataset]:
    """The layout registered as ``name``; an unknown name is an OptionError listing the known ones."""
    return DATASETS[name]


def default_root(name: str) -> Path:
    """Where dataset ``name`` is looked for when no root is given."""
    folder = dataset_class(name).default_folder
    if folder is None:
        raise OptionError(
            f"the {name!r} dataset has no default location", fix="pass the dataset folder explicitly"
        )
    return data_root() / folder


def open_dataset(name: str, root: str | os.PathLike[str] | None = None) -> Dataset:
    """Dataset ``name`` at ``root`` (default ``default_root(name)``); checks the root, reads nothing yet."""
    layout = dataset_class(name)
    return layout(default_root(name) if root is None else Path(root))


def summarize(dataset: Dataset, protocol: str = "fixed", fold: int = 0) -> dict[str, Any]:
    """Classes and images per split of ``protocol``/``fold``, and how many images have ground-truth masks."""
    items = dataset.items()
    images_per_class = Counter(item.label for item in items)
    splits = {}
    for split in ("train", "val", "test"):
        classes = split_classes(dataset, split, protocol, fold)
        splits[split] = {"classes": len(classes), "images": sum(images_per_class[c] for c in classes)}
    return {
        "name": dataset.name,
        "root": str(dataset.root),
        "classes": len(images_per_class),
        "images": len(items),
        "protocol": protocol if protocol == "fixed" else f"{protocol} fold {fold}",
        "splits": splits,
        "ground_truth_masks": sum(1 for item in items if item.ground_truth_mask is not None),
    }
