"""The bench's index.csv: items, ground-truth masks, the split column and bad indexes."""

from __future__ import annotations

import pytest

from bgbias.data.bench import BenchDataset
from bgbias.data.splits import split_items
from bgbias.errors import DatasetError
from tests.replicas import make_bench


@pytest.fixture
def bench(tmp_path):
    return make_bench(tmp_path / "bench")


def rewrite_line(root, number, text):
    path = root / "index.csv"
    lines = path.read_text().splitlines()
    lines[number - 1] = text
    path.write_text("\n".join(lines) + "\n")


def test_items_with_ground_truth_masks(bench):
    items = BenchDataset(bench).items()
    assert len(items) == 16
    assert items[0].id == "images/stamp_000/0.jpg" and items[0].label == 0
    assert items[0].ground_truth_mask == bench / "masks" / "stamp_000" / "0.png"
    assert all(item.ground_truth_mask.is_file() for item in items)
    assert BenchDataset(bench).class_names()[0] == "stamp_000"


def test_split_column_is_the_split(bench):
    dataset = BenchDataset(bench)
    assert dataset.trainval_classes() == [0, 1, 2, 3, 4] and dataset.fixed_val_start() == 3
    assert dataset.test_classes() == [5, 6, 7]
    assert {item.label for item in split_items(dataset, "val")} == {3, 4}


def test_empty_mask_column_means_no_mask(bench):
    rewrite_line(bench, 2, "images/stamp_000/0.jpg,0,stamp_000,train,")
    items = BenchDataset(bench).items()
    assert items[0].ground_truth_mask is None and items[1].ground_truth_mask is not None


def test_index_missing(tmp_path):
    (tmp_path / "bench").mkdir()
    with pytest.raises(DatasetError, match=r"no index.csv") as info:
        BenchDataset(tmp_path / "bench")
    assert "bgbias assets" in info.value.fix


def test_wrong_header(bench):
    rewrite_line(bench, 1, "image,label,split")
    with pytest.raises(DatasetError, match=r"line 1 of index.csv is malformed: expected the header"):
        BenchDataset(bench).items()


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            "images/stamp_000/1.jpg,0,stamp_000,training,masks/stamp_000/1.png",
            "split 'training' is not one of",
        ),
        (
            "images/stamp_000/1.jpg,zero,stamp_000,train,masks/stamp_000/1.png",
            "label 'zero' is not an integer",
        ),
        ("images/stamp_000/1.jpg,0,stamp_000,test,masks/stamp_000/1.png", "class 0 is in split 'test' here"),
        ("images/stamp_000/1.jpg,0,stamp_000", "expected 5 fields, found 3"),
    ],
)
def test_malformed_row_is_named(bench, row, message):
    rewrite_line(bench, 3, row)
    with pytest.raises(DatasetError, match=f"line 3 of index.csv is malformed: {message}"):
        BenchDataset(bench).items()


def test_missing_ground_truth_mask(bench):
    (bench / "masks" / "stamp_001" / "1.png").unlink()
    with pytest.raises(
        DatasetError, match=r"1 of 16 ground-truth masks listed in index.csv are missing"
    ) as info:
        BenchDataset(bench).items()
    assert "stamp_001/1.png" in str(info.value)


def test_missing_image(bench):
    (bench / "images" / "stamp_007" / "0.jpg").unlink()
    with pytest.raises(DatasetError, match="1 of 16 images listed in the index are missing"):
        BenchDataset(bench).items()
