"""Folder datasets: labels from sorted class folders, the half/75 % split and the usual mistakes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bgbias.data.folder import FolderDataset, folder_split_sizes
from bgbias.data.splits import split_items
from bgbias.errors import DatasetError, SkippedEntriesWarning
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


def test_classes_are_named_by_their_folders(folder):
    names = sorted(["zebra", "ant", "Bee", "cat", "dog", "eel", "fox", "gnu"])
    assert FolderDataset(folder).class_names() == dict(enumerate(names))


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


def _odd_name(folder, name: bytes) -> bytes:
    """``folder``/``name`` as bytes: a name that is not valid UTF-8 can only be made that way."""
    return os.fsencode(folder) + b"/" + name


def test_a_looping_link_costs_only_itself_and_is_named(folder):
    os.symlink("loop.jpg", folder / "ant" / "loop.jpg")  # stat() fails: too many levels of links
    os.symlink("gone.jpg", folder / "ant" / "dangling.jpg")
    os.symlink("loop", folder / "ant" / "loop")  # not an image name: not looked at
    os.symlink("cycle", folder / "cycle")  # could be a class folder
    with pytest.warns(SkippedEntriesWarning) as caught:
        items = FolderDataset(folder).items()
    assert [item.id for item in items if item.id.startswith("ant/")] == ["ant/img_0.jpg", "ant/img_1.png"]
    by_folder = {w.message.folder: w.message for w in caught if isinstance(w.message, SkippedEntriesWarning)}
    assert set(by_folder) == {str(folder), str(folder / "ant")}
    assert [path for path, _ in by_folder[str(folder / "ant")].skipped] == [
        str(folder / "ant" / "dangling.jpg"),
        str(folder / "ant" / "loop.jpg"),
    ]
    assert [path for path, _ in by_folder[str(folder)].skipped] == [str(folder / "cycle")]
    text = str(by_folder[str(folder / "ant")])
    assert "loop.jpg: cannot be read" in text and "remove broken or looping links" in text


def test_names_that_are_not_utf8_are_skipped_and_named_as_bytes(folder):
    write_picture(Path(os.fsdecode(_odd_name(folder / "ant", b"caf\xe9.jpg"))), 0)
    os.mkdir(_odd_name(folder, b"\xe9t\xe9"))
    write_picture(Path(os.fsdecode(_odd_name(folder, b"\xe9t\xe9/img.jpg"))), 1)
    with pytest.warns(SkippedEntriesWarning) as caught:
        items = FolderDataset(folder).items()
    assert len(items) == 16 and all(item.id.encode("utf-8") for item in items)
    text = "\n".join(str(w.message) for w in caught)
    assert repr(_odd_name(folder / "ant", b"caf\xe9.jpg")) in text  # b'.../ant/caf\xe9.jpg'
    assert repr(_odd_name(folder, b"\xe9t\xe9")) in text
    assert "the name is not valid UTF-8" in text and "rename" in text
    text.encode("utf-8")  # printable as it is
