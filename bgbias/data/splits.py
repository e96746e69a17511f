"""Class-disjoint splits: the paper's fixed split (docs/design.md, *Datasets and splits*), 4-fold
cross-validation over trainval classes, and ``all``, every class (queries and gallery the same images).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from bgbias.data.items import Dataset, Item
from bgbias.errors import PARAMETER, DatasetError, OptionError, given

SPLITS = ("train", "val", "trainval", "test", "all")
PROTOCOLS = ("fixed", "cv4")
CV_FOLDS = 4


def split_items(dataset: Dataset, split: str, protocol: str = "fixed", fold: int = 0) -> list[Item]:
    """The items of one split (sorted by id). Raises if the split has no classes."""
    classes = split_classes(dataset, split, protocol, fold)
    if not classes:
        raise DatasetError(
            f"the {split!r} split ({protocol}) of the {dataset.name} dataset has no classes",
            path=dataset.root,
            fix="add classes to the dataset (a folder dataset needs at least 4 class folders for train, val "
            "and test to be non-empty)",
        )
    wanted = set(classes)
    return [item for item in dataset.items() if item.label in wanted]


def with_contiguous_labels(items: Sequence[Item]) -> list[Item]:
    """``items`` with their labels renumbered 0 … C−1 in sorted label order: what proxy losses index."""
    label_of = {label: i for i, label in enumerate(sorted({item.label for item in items}))}
    return [dataclasses.replace(item, label=label_of[item.label]) for item in items]


def split_classes(dataset: Dataset, split: str, protocol: str = "fixed", fold: int = 0) -> list[int]:
    """The ordered classes of one split; may be empty for tiny datasets."""
    check_split_options(split, protocol, fold)
    if split == "test":
        return list(dataset.test_classes())
    if split == "all":
        return sorted({*dataset.trainval_classes(), *dataset.test_classes()})
    trainval = list(dataset.trainval_classes())
    if split == "trainval":
        return trainval
    if protocol == "fixed":
        start = dataset.fixed_val_start()
        train, val = trainval[:start], trainval[start:]
    else:
        if len(trainval) < CV_FOLDS:
            raise DatasetError(
                f"cv4 needs at least {CV_FOLDS} trainval classes; "
                f"the {dataset.name} dataset has {len(trainval)}",
                path=dataset.root,
                fix=f"use {given('fixed')}, or add classes to the dataset",
                parameter="protocol",
            )
        partitions = contiguous_partitions(trainval, CV_FOLDS)
        val = partitions[fold]
        train = [c for i, part in enumerate(partitions) if i != fold for c in part]
    return train if split == "train" else val


def contiguous_partitions(values: Iterable[int], parts: int) -> list[list[int]]:
    """Cut ``values`` in order into ``parts`` contiguous pieces whose sizes differ by at most one (earlier
    pieces take the remainder), e.g. 98 Cars196 trainval classes → 25, 25, 24, 24."""
    ordered = list(values)
    size, extra = divmod(len(ordered), parts)
    pieces, start = [], 0
    for index in range(parts):
        stop = start + size + (1 if index < extra else 0)
        pieces.append(ordered[start:stop])
        start = stop
    return pieces


def partition_by_class_id(
    labels: Iterable[int], last_train: int, last_trainval: int
) -> tuple[list[int], list[int], int]:
    """(trainval classes, test classes, val start) for layouts split by class id: train ≤ ``last_train`` <
    val ≤ ``last_trainval`` < test. Only classes present in ``labels`` are listed."""
    classes = sorted(set(labels))
    trainval = [c for c in classes if c <= last_trainval]
    test = [c for c in classes if c > last_trainval]
    return trainval, test, sum(1 for c in trainval if c <= last_train)


def check_split_options(split: str, protocol: str, fold: int) -> None:
    """Raise ``OptionError`` for an unknown split or protocol, or a fold the protocol does not have."""
    if split not in SPLITS:
        raise OptionError(f"unknown split {split!r}", fix=f"use one of {', '.join(SPLITS)}")
    if protocol not in PROTOCOLS:
        raise OptionError(f"unknown split protocol {protocol!r}", fix=f"use one of {', '.join(PROTOCOLS)}")
    if isinstance(fold, bool) or not isinstance(fold, int):
        raise OptionError(f"fold must be an integer, got {fold!r}", fix=f"use a fold in 0..{CV_FOLDS - 1}")
    if protocol == "fixed" and fold != 0:
        raise OptionError(
            f"the fixed split has a single fold, got {given(fold)}",
            fix=f"leave out {PARAMETER}, or use the cv4 protocol", parameter="fold",
        )
    if protocol == "cv4" and not 0 <= fold < CV_FOLDS:
        raise OptionError(f"cv4 has folds 0..{CV_FOLDS - 1}, got fold {fold}",
                          fix=f"use a fold in 0..{CV_FOLDS - 1}")
