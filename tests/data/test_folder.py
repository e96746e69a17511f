"""Folder datasets: labels from sorted class folders, the half/75 % split and the usual mistakes."""

from __future__ import annotations

import pytest

from bgbias.data.folder import FolderDataset, folder_split_sizes
from bgbias.data.splits import split_items
from bgbias.errors import DatasetError
from tests.replicas import make_folder, write_picture


@pytest.fixture
def folder(tmp_path):
    return make_folder(tmp_path / "pets")


def test_labels_follow_sorted_class_names(folder):
    items = FolderDataset(folder).items()
    names = sorted(["zebra", "ant", "Bee", "cat", "dog", "eel", "fox", "gnu"])
    assert names[:2] == ["Bee", "ant"]
    assert [item.id for item in items][:2] == ["Bee/img_0.jpg", "Bee/img_1.png"]
    assert {item.id.split("/")[0]: item.label for item in items} == {name: i for i, name in enumerate(names)}
    assert items[0].image == folder / "Bee" / "img_0.jpg"


def test_split_halves_then_75_percent(folder):
    dataset = FolderDataset(folder)
    assert dataset.trainval_classes() == [0, 1, 2, 3] and dataset.test_classes() == [4, 5, 6, 7]
    assert {item.label for item in split_items(dataset, "train")} == {0, 1, 2}
    assert {item.label for item in split_items(dataset, "val")} == {3}
    assert len(split_items(dataset, "test")) == 8


@pytest.mark.parametrize(
    ("classes", "expected"),
    [(1, (1, 1)), (3, (2, 1)), (4, (2, 1)), (5, (3, 2)), (8, (4, 3)), (200, (100, 75))],
)
def test_folder_split_sizes(classes, expected):
    assert folder_split_sizes(classes) == expected


def test_other_files_are_ignored(folder):
    (folder / "ant" / "notes.txt").write_text("not an image\n")
    (folder / "ant" / ".hidden.jpg").write_bytes(b"")
    (folder / "ant" / "upper.JPEG").write_bytes((folder / "ant" / "img_0.jpg").read_bytes())
    (folder / ".cache").mkdir()
    ids = [item.id for item in FolderDataset(folder).items() if item.id.startswith("ant/")]
    assert ids == ["ant/img_0.jpg", "ant/img_1.png", "ant/upper.JPEG"]


def test_root_given_as_a_class_folder(folder):
    with pytest.raises(DatasetError, match="no class sub-folders") as info:
        FolderDataset(folder / "ant").items()
    assert str(folder) in info.value.fix


def test_root_given_as_the_parent_of_the_dataset(folder):
    with pytest.raises(DatasetError, match="class folder 'pets' has no images directly inside") as info:
        FolderDataset(folder.parent).items()
    assert f"pass {folder} as the dataset root" in info.value.fix


def test_empty_class_folder(folder):
    (folder / "empty").mkdir()
    with pytest.raises(DatasetError, match="'empty' has no images") as info:
        FolderDataset(folder).items()
    assert "add images" in info.value.fix


def test_root_without_class_folders_or_images(tmp_path):
    with pytest.raises(DatasetError, match="no class sub-folders") as info:
        FolderDataset(tmp_path).items()
    assert "one sub-folder per class" in info.value.fix


def test_missing_root(tmp_path):
    with pytest.raises(DatasetError, match="not found"):
        FolderDataset(tmp_path / "nothing")


def test_images_that_would_share_a_mask(folder):
    write_picture(folder / "ant" / "img_0.png", 0)
    with pytest.raises(DatasetError, match=r"would share the mask path ant/img_0.png"):
        FolderDataset(folder).items()
