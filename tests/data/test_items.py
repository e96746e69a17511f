"""Items, mask paths and the shared layout helpers."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path, PurePosixPath

import pytest

from bgbias.data.items import make_item, mask_path
from bgbias.data.layout import describe_paths, find_nearby_root, missing_files, require_files
from bgbias.errors import DatasetError


def test_make_item():
    item = make_item(Path("/data/cub"), "images/001.A/x.jpg", 1)
    assert item.id == "images/001.A/x.jpg"
    assert item.relpath == PurePosixPath("images/001.A/x.jpg")
    assert item.image == Path("/data/cub/images/001.A/x.jpg")
    assert item.ground_truth_mask is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        item.label = 2  # type: ignore[misc]


@pytest.mark.parametrize(
    ("relpath", "expected"),
    [
        ("images/001.A/x.jpg", "images/001.A/x.png"),
        ("bike_final/111_0.JPG", "bike_final/111_0.png"),
        ("cls/photo.v2.jpeg", "cls/photo.v2.png"),
        ("cls/already.png", "cls/already.png"),
    ],
)
def test_mask_path_mirrors_the_relative_path(relpath, expected):
    item = make_item(Path("/data/x"), relpath, 0)
    assert mask_path(item, Path("masks/x")) == Path("masks/x") / expected


def test_find_nearby_root(tmp_path):
    root = tmp_path / "outer" / "CUB_200_2011"
    (root / "images" / "001.A").mkdir(parents=True)
    (root / "images.txt").write_text("")
    assert find_nearby_root(tmp_path / "outer", "images.txt") == root
    assert find_nearby_root(tmp_path, "images.txt") == root
    assert find_nearby_root(root / "images" / "001.A", "images.txt") == root
    assert find_nearby_root(root / "images", "cars_annos.mat") is None


def test_missing_files(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.jpg").write_bytes(b"")
    (tmp_path / "a" / "dir.jpg").mkdir()
    wanted = [
        tmp_path / "a" / "x.jpg",
        tmp_path / "a" / "y.jpg",
        tmp_path / "a" / "dir.jpg",
        tmp_path / "b" / "z",
    ]
    assert missing_files(wanted) == sorted(wanted[1:])


def test_a_looping_link_is_missing_itself_without_hiding_its_folder(tmp_path):
    (tmp_path / "x.jpg").write_bytes(b"")
    os.symlink("loop.jpg", tmp_path / "loop.jpg")
    assert missing_files([tmp_path / "x.jpg", tmp_path / "loop.jpg"]) == [tmp_path / "loop.jpg"]


def test_require_files_names_the_first_few(tmp_path):
    paths = [tmp_path / f"{i}.png" for i in range(7)]
    with pytest.raises(DatasetError, match=r"7 of 7 masks are missing on disk: .*0\.png.*\(2 more\)") as info:
        require_files(paths, "masks", tmp_path, fix="restore them")
    assert info.value.fix == "restore them" and info.value.path == str(tmp_path)


def test_describe_paths():
    assert describe_paths([Path("a"), Path("b")]) == "a, b"
