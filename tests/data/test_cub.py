"""CUB-200-2011: ids, labels, ground-truth masks, the paper's fixed split and every bad layout."""

from __future__ import annotations

import shutil

import pytest

from bgbias.data.cub import CubDataset
from bgbias.data.splits import split_items
from bgbias.errors import DatasetError
from tests.replicas import make_cub


@pytest.fixture(scope="module")
def cub(tmp_path_factory):
    return CubDataset(make_cub(tmp_path_factory.mktemp("data") / "CUB_200_2011"))


@pytest.fixture
def small_cub(tmp_path):
    return make_cub(tmp_path / "CUB_200_2011", n_classes=3, per_class=2)


def test_items_ids_labels_and_masks(cub):
    items = cub.items()
    assert len(items) == 200
    assert [item.id for item in items] == sorted(item.id for item in items)
    first = items[0]
    assert first.id == "images/001.Bird_001/Bird_001_0000_1.jpg"
    assert str(first.relpath) == first.id
    assert first.image == cub.root / "images" / "001.Bird_001" / "Bird_001_0000_1.jpg"
    assert first.image.is_absolute() and first.image.is_file()
    assert first.label == 1
    assert first.ground_truth_mask == cub.root / "segmentations" / "001.Bird_001" / "Bird_001_0000_1.png"
    assert sorted({item.label for item in items}) == list(range(1, 201))
    assert cub.class_names()[1] == "001.Bird_001" and len(cub.class_names()) == 200


def test_fixed_split_matches_the_seed(cub):
    labels = {split: {item.label for item in split_items(cub, split)} for split in ("train", "val", "test")}
    assert labels["train"] == set(range(1, 76))
    assert labels["val"] == set(range(76, 101))
    assert labels["test"] == set(range(101, 201))
    assert cub.trainval_classes() == list(range(1, 101))
    assert cub.fixed_val_start() == 75


def test_without_segmentations_there_are_no_ground_truth_masks(tmp_path):
    dataset = CubDataset(make_cub(tmp_path / "cub", n_classes=2, segmentations=False))
    assert all(item.ground_truth_mask is None for item in dataset.items())


def test_missing_root(tmp_path):
    with pytest.raises(DatasetError, match="not found") as info:
        CubDataset(tmp_path / "CUB_200_2011")
    assert "CUB_200_2011.tgz" in info.value.fix


def test_root_given_as_parent_folder(small_cub):
    with pytest.raises(DatasetError, match=r"no images.txt") as info:
        CubDataset(small_cub.parent)
    assert str(small_cub) in info.value.fix


def test_root_given_as_outer_folder_of_the_seed_layout(tmp_path):
    real = make_cub(tmp_path / "cub2011" / "CUB_200_2011", n_classes=2)
    with pytest.raises(DatasetError) as info:
        CubDataset(tmp_path)
    assert str(real) in info.value.fix


@pytest.mark.parametrize("inside", ["images", "images/001.Bird_001"])
def test_root_given_as_a_folder_inside(small_cub, inside):
    with pytest.raises(DatasetError) as info:
        CubDataset(small_cub / inside)
    assert f"pass {small_cub} " in info.value.fix


def test_root_is_a_file(small_cub):
    with pytest.raises(DatasetError, match="not a folder"):
        CubDataset(small_cub / "images.txt")


def test_labels_file_missing(small_cub):
    (small_cub / "image_class_labels.txt").unlink()
    with pytest.raises(DatasetError, match=r"image_class_labels.txt not found"):
        CubDataset(small_cub).items()


@pytest.mark.parametrize(
    ("filename", "line", "message"),
    [
        ("images.txt", "7 a b", "line 3 of images.txt is malformed: expected 2 fields"),
        ("images.txt", "x 001.Bird_001/a.jpg", "line 3 of images.txt is malformed: image id 'x'"),
        ("images.txt", "1 001.Bird_001/a.jpg", "line 3 of images.txt is malformed: image id 1 appears twice"),
        ("image_class_labels.txt", "3 201", "line 3 of image_class_labels.txt is malformed: class id 201"),
        (
            "image_class_labels.txt",
            "3 bird",
            "line 3 of image_class_labels.txt is malformed: class id 'bird'",
        ),
    ],
)
def test_malformed_line_is_named(small_cub, filename, line, message):
    path = small_cub / filename
    lines = path.read_text().splitlines()
    lines[2] = line
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError) as info:
        CubDataset(small_cub).items()
    assert message in str(info.value) and info.value.path == str(path)


def test_image_without_label(small_cub):
    path = small_cub / "image_class_labels.txt"
    path.write_text("\n".join(path.read_text().splitlines()[:-1]) + "\n")
    with pytest.raises(DatasetError, match=r"1 image ids of images.txt have no line"):
        CubDataset(small_cub).items()


def test_label_without_image(small_cub):
    with (small_cub / "image_class_labels.txt").open("a") as handle:
        handle.write("99 1\n")
    with pytest.raises(DatasetError, match=r"not in images.txt"):
        CubDataset(small_cub).items()


def test_missing_images_are_counted_and_named(tmp_path):
    root = make_cub(tmp_path / "cub", n_classes=8, per_class=1)
    for folder in sorted((root / "images").iterdir())[:7]:
        shutil.rmtree(folder)
    with pytest.raises(DatasetError) as info:
        CubDataset(root).items()
    message = str(info.value)
    assert "7 of 8 images listed in the index are missing" in message
    assert "Bird_001_0000_1.jpg" in message and "(2 more)" in message
    assert info.value.path == str(root / "images.txt")


def test_incomplete_segmentations_folder(small_cub):
    (small_cub / "segmentations" / "002.Bird_002" / "Bird_002_0001_4.png").unlink()
    with pytest.raises(DatasetError, match="1 of 6 ground-truth masks are missing") as info:
        CubDataset(small_cub).items()
    assert "Bird_002_0001_4.png" in str(info.value) and "segmentations" in info.value.fix


def test_an_index_line_naming_an_image_outside_the_dataset_is_refused_naming_the_index(tmp_path):
    """An item's id names its mask, its renders and its attribution maps under their folders: one that
    leads out of the dataset's folder would write them outside."""
    root = make_cub(tmp_path / "CUB_200_2011", n_classes=3, per_class=2, segmentations=False)
    (tmp_path / "outside.jpg").write_bytes(b"")
    listed = "../../outside.jpg"  # images/../../outside.jpg
    index = root / "images.txt"
    first, *rest = index.read_text().splitlines()
    index.write_text("\n".join([f"{first.split()[0]} {listed}", *rest]) + "\n")
    with pytest.raises(DatasetError, match="outside the dataset's folder") as raised:
        CubDataset(root).items()
    assert raised.value.path == str(index) and listed in raised.value.problem


def test_index_files_with_a_byte_order_mark_read_as_without(small_cub):
    expected = [(item.id, item.label) for item in CubDataset(small_cub).items()]
    for name in ("images.txt", "image_class_labels.txt"):
        path = small_cub / name
        path.write_text(path.read_text(encoding="utf-8"), encoding="utf-8-sig")
    assert [(item.id, item.label) for item in CubDataset(small_cub).items()] == expected
