"""How many images a study's dataset has per split, for its cost (:mod:`bgbias.study.cost`) and its masks
shards (:mod:`bgbias.study.steps`): counted where the dataset is; before it is there, a bench's from the
settings it will be built with, and a published benchmark's from its known size (a dry run's estimate,
docs/study.md, *--dry-run*), both through the same cost model."""

from __future__ import annotations

import collections
from dataclasses import dataclass
from pathlib import Path

from bgbias.assets.store import asset_dir
from bgbias.bench.build import BENCH_PRESETS, split_classes
from bgbias.bench.stamps import select_stamps
from bgbias.data.items import KnownSize
from bgbias.data.registry import dataset_class, open_dataset
from bgbias.data.splits import partition_by_class_id, split_items
from bgbias.errors import AssetError, DatasetError
from bgbias.study.spec import StudySpec


@dataclass(frozen=True)
class SplitSizes:
    """How many images a study's dataset has per split: each training class's count (batches per epoch
    depend on them), the validation and the test images."""

    train_classes: tuple[int, ...]
    val: int
    test: int

    @property
    def images(self) -> int:
        """Every image of the splits: what the masks and the layout's check go over."""
        return sum(self.train_classes) + self.val + self.test


def split_sizes(spec: StudySpec) -> SplitSizes:
    """The dataset's split sizes (the fixed split): counted where it is, else (a bench the study will build)
    from the bench's settings and the stamps it will be built from, or (a published dataset not downloaded
    yet, :func:`known_size`) from its known size."""
    known = known_size(spec)
    if known is not None:
        return _known_sizes(known)
    try:
        dataset = open_dataset(spec.dataset, spec.root)
        dataset.items()
    except DatasetError:
        if spec.bench is None:
            raise
        return _planned_bench_sizes(spec)
    counts = collections.Counter(item.label for item in split_items(dataset, "train", "fixed", 0))
    return SplitSizes(tuple(counts.values()), len(split_items(dataset, "val", "fixed", 0)),
                      len(split_items(dataset, "test", "fixed", 0)))


def known_size(spec: StudySpec) -> KnownSize | None:
    """The known size of the study's dataset where its root is not a folder yet (a dry run before the
    download, :func:`~bgbias.study.spec.dataset_spec`); None where the dataset is there (it is counted) or
    has no known size."""
    if spec.bench is not None or Path(spec.root).is_dir():
        return None
    return dataset_class(spec.dataset).known_size


def _known_sizes(known: KnownSize) -> SplitSizes:
    """A published dataset's split sizes from its known size: its classes cut by class id as its layout cuts
    them (:func:`~bgbias.data.splits.partition_by_class_id`), the test images spread evenly over the test
    classes and the others over the rest (the first classes of each one more where they do not divide)."""
    trainval, test, val_start = partition_by_class_id(range(1, known.classes + 1), known.last_train_class,
                                                      known.last_trainval_class)
    images = {**_spread(known.images - known.test_images, trainval), **_spread(known.test_images, test)}
    train, val = trainval[:val_start], trainval[val_start:]
    return SplitSizes(tuple(images[label] for label in train), sum(images[label] for label in val),
                      sum(images[label] for label in test))


def _spread(images: int, classes: list[int]) -> dict[int, int]:
    """``images`` dealt evenly to ``classes``, by class."""
    share, extra = divmod(images, len(classes))
    return {label: share + (index < extra) for index, label in enumerate(classes)}


def known_size_note(spec: StudySpec) -> str | None:
    """What the dry run says when it priced a dataset from its known size: that the dataset is not there,
    the size and split it used, and where to put the dataset; None when it counted the dataset."""
    known = known_size(spec)
    if known is None:
        return None
    sizes = _known_sizes(known)
    val = known.last_trainval_class - known.last_train_class
    return (f"the {spec.dataset} dataset is not at {spec.root}: priced from its known size: "
            f"{known.images:,} images, {known.classes:,} classes (fixed split: {len(sizes.train_classes):,} "
            f"train, {val:,} val, {known.classes - known.last_trainval_class:,} test classes, "
            f"{known.test_images:,} test images; the images taken as evenly spread over the classes), "
            f"synthetic pictures standing in for its images\n"
            f"before the study runs, put it there ({dataset_class(spec.dataset).obtain}), or pass --root DIR "
            f"where it is")


PINNED_BENCH_CLASSES = 248
"""Classes of the bench built from the pinned stamps package (``bgbias.bench.stamps``): what a study counts
on before the stamps are fetched."""


def _planned_bench_sizes(spec: StudySpec) -> SplitSizes:
    assert spec.bench is not None
    try:
        classes = len(select_stamps(asset_dir("tuxpaint_stamps") / "stamps"))
    except AssetError:
        classes = PINNED_BENCH_CLASSES
    views = BENCH_PRESETS[spec.bench.preset].views_per_class
    splits = collections.Counter(split_classes(classes, spec.bench.seed))
    return SplitSizes((views,) * splits["train"], views * splits["val"], views * splits["test"])
