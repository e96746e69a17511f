"""Datasets by name: where each lives by default, how to open it, and what it holds."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bgbias.data.bench import BenchDataset
from bgbias.data.cars import CarsDataset
from bgbias.data.cub import CubDataset
from bgbias.data.folder import FolderDataset
from bgbias.data.items import Dataset
from bgbias.data.sop import SopDataset
from bgbias.data.splits import split_classes
from bgbias.errors import OptionError
from bgbias.paths import data_root

DATASET_NAMES = ("cub", "cars", "sop", "folder", "bench")
LAYOUTS: dict[str, type[Dataset]] = {
    layout.name: layout for layout in (CubDataset, CarsDataset, SopDataset, FolderDataset, BenchDataset)
}


def default_root(name: str) -> Path:
    """Where dataset ``name`` is looked for when no root is given."""
    check_name(name)
    folder = LAYOUTS[name].default_folder
    if folder is None:
        raise OptionError(
            f"the {name!r} dataset has no default location", fix="pass the dataset folder explicitly"
        )
    return data_root() / folder


def open_dataset(name: str, root: str | os.PathLike[str] | None = None) -> Dataset:
    """Dataset ``name`` at ``root`` (default ``default_root(name)``); checks the root, reads nothing yet."""
    check_name(name)
    return LAYOUTS[name](default_root(name) if root is None else Path(root))


def summarize(dataset: Dataset, protocol: str = "fixed", fold: int = 0) -> dict[str, Any]:
    """Classes and images per split of ``protocol``/``fold``, and how many images have ground-truth masks."""
    items = dataset.items()
    images_per_class: dict[int, int] = {}
    for item in items:
        images_per_class[item.label] = images_per_class.get(item.label, 0) + 1
    splits = {}
    for split in ("train", "val", "test"):
        classes = split_classes(dataset, split, protocol, fold)
        splits[split] = {"classes": len(classes), "images": sum(images_per_class.get(c, 0) for c in classes)}
    return {
        "name": dataset.name,
        "root": str(dataset.root),
        "classes": len(images_per_class),
        "images": len(items),
        "protocol": protocol if protocol == "fixed" else f"{protocol} fold {fold}",
        "splits": splits,
        "ground_truth_masks": sum(1 for item in items if item.ground_truth_mask is not None),
    }


def check_name(name: str) -> None:
    if name not in DATASET_NAMES:
        raise OptionError(f"unknown dataset {name!r}", fix=f"use one of {', '.join(DATASET_NAMES)}")
