"""The table dataset: rows, columns, CSV files and torch Datasets as one of bgbias's datasets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bgbias.data.images import load_image, load_mask
from bgbias.data.memory import InMemoryImage
from bgbias.data.registry import open_dataset
from bgbias.data.splits import split_items
from bgbias.data.table import image_table
from bgbias.errors import DatasetError, ImageError, OptionError


@pytest.fixture
def photos(tmp_path) -> Path:
    """Eight images of four classes in two folders (a/ and b/)."""
    rng = np.random.default_rng(0)
    for i in range(8):
        folder = tmp_path / ("a" if i < 4 else "b")
        folder.mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    return tmp_path


def test_a_csv_is_a_dataset_with_paths_relative_to_it_and_its_classes_split_in_halves(photos):
    rows = "\n".join(f"{'a' if i < 4 else 'b'}/{i}.png,{i // 2}" for i in range(8))
    (photos / "images.csv").write_text(f"path,label\n{rows}\n")
    table = open_dataset("table", photos / "images.csv")
    items = table.items()
    assert [item.id for item in items][:2] == ["a/0.png", "a/1.png"] and items[0].image == photos / "a/0.png"
    assert [item.label for item in items] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert table.trainval_classes() == [0, 1] and table.test_classes() == [2, 3]
    assert len(split_items(table, "all")) == 8 and len(split_items(table, "test")) == 4
    assert table.key.startswith("table-") and table.key == open_dataset("table", photos / "images.csv").key


@pytest.mark.parametrize(("text", "words"), [
    ("file,label\na/0.png,1\n", "it needs path or image and label"),
    ("path,label\n", "the table has no rows"),
])
def test_a_csv_that_is_no_table_names_its_file(photos, text, words):
    (photos / "images.csv").write_text(text)
    with pytest.raises(DatasetError, match=words) as raised:
        open_dataset("table", photos / "images.csv").items()
    assert raised.value.path == str(photos / "images.csv")


def test_a_folder_is_no_csv(photos):
    with pytest.raises(DatasetError, match="must be a CSV file"):
        open_dataset("table", photos)


def test_rows_name_their_missing_images_and_duplicates(photos):
    with pytest.raises(DatasetError, match="missing") as raised:
        image_table([("a/0.png", 0), ("a/9.png", 0)], photos).items()
    assert "a/9.png" in str(raised.value)
    with pytest.raises(DatasetError, match="listed twice"):
        image_table([("a/0.png", 0), (str(photos / "a/0.png"), 1)], photos).items()


def test_string_labels_are_classes_in_sorted_order(photos):
    table = image_table({"image": [f"a/{i}.png" for i in range(4)], "label": ["dog", "cat", "dog", "ant"]},
                        photos)
    assert [item.label for item in table.items()] == [2, 1, 2, 0]
    assert table.class_names() == {0: "ant", 1: "cat", 2: "dog"}


def test_integer_labels_are_their_own_names(photos):
    table = image_table([(f"a/{i}.png", 7 * i) for i in range(4)], photos)
    assert table.class_names() == {0: "0", 7: "7", 14: "14", 21: "21"}


def test_a_datasets_samples_are_read_when_used_and_name_themselves(photos):
    import torch

    class Samples(torch.utils.data.Dataset):
        reads = 0

        def __len__(self) -> int:
            return 3

        def __getitem__(self, i: int):
            Samples.reads += 1
            if i == 2:
                return np.zeros((5, 0, 3), dtype=np.uint8), 1, np.zeros((4, 4), dtype=np.uint8)
            return torch.rand(3, 8, 6), torch.tensor(i), torch.ones(1, 8, 6)

    table = image_table(Samples())
    items = table.items()
    assert [item.id for item in items] == ["000000", "000001", "000002"] and Samples.reads == 4  # labels
    assert isinstance(items[0].image, InMemoryImage) and load_image(items[0].image).size == (6, 8)
    assert load_mask(items[1].saliency_mask).getextrema() == (255, 255)
    with pytest.raises(ImageError, match="is no image") as raised:
        load_image(items[2].image)
    assert raised.value.path == "dataset[2]"


def test_samples_must_be_image_label_pairs():
    import torch

    class Wrong(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 1

        def __getitem__(self, i: int):
            return {"image": 0}

    with pytest.raises(OptionError, match=r"not \(image, label\[, mask\]\)"):
        image_table(Wrong())
