"""Stanford Online Products: Ebay lists, the paper's code's boundary at class 8489 and every bad layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from bgbias.data.items import mask_path
from bgbias.data.sop import SopDataset
from bgbias.data.splits import split_items
from bgbias.errors import DatasetError
from tests.replicas import make_sop


@pytest.fixture(scope="module")
def sop(tmp_path_factory):
    return SopDataset(make_sop(tmp_path_factory.mktemp("data") / "Stanford_Online_Products"))


@pytest.fixture
def small_sop(tmp_path):
    return make_sop(tmp_path / "Stanford_Online_Products", train_class_ids=(1, 9000), test_class_ids=(11319,))


def labels(items):
    return sorted({item.label for item in items})


def test_items_keep_the_dataset_class_ids(sop):
    items = sop.items()
    assert len(items) == 22
    assert [item.id for item in items] == sorted(item.id for item in items)
    by_id = {item.id: item for item in items}
    item = by_id["chair_final/100000008489_1.JPG"]
    assert item.label == 8489 and item.image == sop.root / "chair_final" / "100000008489_1.JPG"


def test_seed_boundary_puts_8489_in_train(sop):
    # The paper's code keeps (class_id - 1) < 8489 for training: class ids up to and including 8489.
    assert labels(split_items(sop, "train")) == [1, 2, 3, 8488, 8489]
    assert labels(split_items(sop, "val")) == [8490, 8491, 11318]
    assert labels(split_items(sop, "test")) == [11319, 11320, 22634]
    assert sop.trainval_classes() == [1, 2, 3, 8488, 8489, 8490, 8491, 11318]
    assert sop.fixed_val_start() == 5


def test_mask_path_replaces_the_upper_case_suffix(sop):
    item = sop.items()[0]
    assert mask_path(item, Path("/m/sop")) == Path("/m/sop") / Path(item.id).with_suffix(".png")
    assert mask_path(item, Path("/m/sop")).suffix == ".png"


def test_root_given_as_parent(small_sop):
    with pytest.raises(DatasetError, match=r"no Ebay_train.txt") as info:
        SopDataset(small_sop.parent)
    assert str(small_sop) in info.value.fix


def test_root_given_as_a_super_class_folder(small_sop):
    with pytest.raises(DatasetError) as info:
        SopDataset(small_sop / "bicycle_final")
    assert f"pass {small_sop} " in info.value.fix


def test_test_list_missing(small_sop):
    (small_sop / "Ebay_test.txt").unlink()
    with pytest.raises(DatasetError, match=r"Ebay_test.txt not found") as info:
        SopDataset(small_sop).items()
    assert info.value.path == str(small_sop / "Ebay_test.txt")


def test_wrong_header(small_sop):
    path = small_sop / "Ebay_train.txt"
    path.write_text(path.read_text().replace("super_class_id", "super"))
    with pytest.raises(DatasetError, match=r"line 1 of Ebay_train.txt is malformed: expected the header"):
        SopDataset(small_sop).items()


def test_empty_list(small_sop):
    (small_sop / "Ebay_test.txt").write_text("")
    with pytest.raises(DatasetError, match="found an empty file"):
        SopDataset(small_sop).items()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("5 9000 1", "expected 4 fields, found 3"),
        ("5 nine 1 bicycle_final/x.JPG", "class_id 'nine' is not an integer"),
        ("five 9000 1 bicycle_final/x.JPG", "image_id 'five' is not an integer"),
        ("5 0 1 bicycle_final/x.JPG", "class_id 0 is not positive"),
    ],
)
def test_malformed_line_is_named(small_sop, line, message):
    path = small_sop / "Ebay_train.txt"
    lines = path.read_text().splitlines()
    lines[3] = line
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match=f"line 4 of Ebay_train.txt is malformed: {message}"):
        SopDataset(small_sop).items()


def test_class_in_train_and_test(tmp_path):
    root = make_sop(tmp_path / "sop", train_class_ids=(1, 2), test_class_ids=(2, 3))
    with pytest.raises(DatasetError, match="1 class ids appear in both"):
        SopDataset(root).items()


def test_missing_images(small_sop):
    for path in (small_sop / "bicycle_final").glob("*.JPG"):
        path.unlink()
    with pytest.raises(DatasetError, match="images listed in the index are missing") as info:
        SopDataset(small_sop).items()
    assert "bicycle_final" in str(info.value)
