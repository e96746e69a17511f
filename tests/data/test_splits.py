"""Splits: fixed and cv4 over every layout, disjointness, coverage and option validation."""

from __future__ import annotations

import pytest

from bgbias.data.cars import CarsDataset
from bgbias.data.cub import CubDataset
from bgbias.data.folder import FolderDataset
from bgbias.data.sop import SopDataset
from bgbias.data.splits import CV_FOLDS, contiguous_partitions, split_classes, split_items
from bgbias.errors import DatasetError, OptionError
from tests.replicas import make_cars, make_cub, make_folder, make_sop


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    base = tmp_path_factory.mktemp("data")
    return {
        "cub": CubDataset(make_cub(base / "cub", segmentations=False)),
        "cars": CarsDataset(make_cars(base / "cars")),
        "sop": SopDataset(make_sop(base / "sop")),
    }


def labels(items):
    return {item.label for item in items}


@pytest.mark.parametrize("name", ["cub", "cars", "sop"])
def test_fixed_split_is_class_disjoint_and_complete(datasets, name):
    dataset = datasets[name]
    train, val, test = (labels(split_items(dataset, s)) for s in ("train", "val", "test"))
    assert not train & val and not train & test and not val & test
    assert train | val == labels(split_items(dataset, "trainval")) == set(dataset.trainval_classes())
    assert train | val | test == labels(dataset.items())


@pytest.mark.parametrize("name", ["cub", "cars", "sop"])
def test_cv4_folds(datasets, name):
    dataset = datasets[name]
    trainval = set(dataset.trainval_classes())
    test = split_items(dataset, "test", "cv4", 0)
    vals = []
    for fold in range(CV_FOLDS):
        train = labels(split_items(dataset, "train", "cv4", fold))
        val = labels(split_items(dataset, "val", "cv4", fold))
        assert not train & val
        assert train | val == trainval
        assert split_items(dataset, "test", "cv4", fold) == test
        assert split_items(dataset, "trainval", "cv4", fold) == split_items(dataset, "trainval")
        vals.append(val)
    assert set().union(*vals) == trainval
    assert sum(len(v) for v in vals) == len(trainval)  # the validation partitions do not overlap


def test_cv4_partition_sizes(datasets):
    assert [len(split_classes(datasets["cub"], "val", "cv4", f)) for f in range(4)] == [25, 25, 25, 25]
    assert [len(split_classes(datasets["cars"], "val", "cv4", f)) for f in range(4)] == [25, 25, 24, 24]
    assert split_classes(datasets["cars"], "val", "cv4", 2) == list(range(51, 75))


def test_last_cv4_fold_of_cub_and_cars_is_the_fixed_split(datasets):
    for name in ("cub", "cars"):
        assert split_classes(datasets[name], "val", "cv4", 3) == split_classes(datasets[name], "val")


def test_items_keep_id_order(datasets):
    ids = [item.id for item in split_items(datasets["cub"], "val", "cv4", 1)]
    assert ids == sorted(ids)


def test_contiguous_partitions():
    assert contiguous_partitions(range(10), 4) == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
    assert contiguous_partitions([5, 3], 4) == [[5], [3], [], []]


@pytest.mark.parametrize(
    ("split", "protocol", "fold", "message"),
    [
        ("training", "fixed", 0, "unknown split 'training'"),
        ("train", "cv5", 0, "unknown split protocol 'cv5'"),
        ("train", "fixed", 1, "the fixed split has a single fold"),
        ("train", "cv4", 4, "cv4 has folds 0..3, got fold 4"),
        ("train", "cv4", -1, "cv4 has folds 0..3"),
        ("train", "cv4", "1", "fold must be an integer"),
        ("train", "cv4", True, "fold must be an integer"),
    ],
)
def test_bad_options(datasets, split, protocol, fold, message):
    with pytest.raises(OptionError, match=message) as info:
        split_items(datasets["cub"], split, protocol, fold)
    assert info.value.fix


def test_empty_split_is_an_error(tmp_path):
    dataset = FolderDataset(make_folder(tmp_path / "f", class_names=("a", "b")))
    assert split_classes(dataset, "train") == [0] and split_classes(dataset, "val") == []
    assert split_classes(dataset, "test") == [1]
    with pytest.raises(DatasetError, match=r"the 'val' split .* has no classes"):
        split_items(dataset, "val")


def test_cv4_needs_four_trainval_classes(tmp_path):
    dataset = FolderDataset(make_folder(tmp_path / "f", class_names=("a", "b", "c", "d", "e")))
    with pytest.raises(DatasetError, match="cv4 needs at least 4 trainval classes"):
        split_items(dataset, "train", "cv4", 0)


def test_all_is_every_image_of_the_dataset_whatever_the_protocol(tmp_path):
    dataset = FolderDataset(make_folder(tmp_path / "f"))
    every = [item.id for item in dataset.items()]
    assert [item.id for item in split_items(dataset, "all")] == every and len(every) == 16
    assert split_classes(dataset, "all", "cv4", 2) == list(range(8))


def test_every_split_a_corrupted_set_may_have_draws_from_a_pool():
    from bgbias.corrupted.manifest_schema import CORRUPTED_SPLITS
    from bgbias.corrupted.manifests import POOL_OF_SPLIT
    from bgbias.data.splits import SPLITS

    assert set(POOL_OF_SPLIT) == set(CORRUPTED_SPLITS) <= set(SPLITS)
    assert POOL_OF_SPLIT["all"] == "test"  # an audit never meets BGAugment's training backgrounds
