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


def test_a_row_that_climbs_out_is_normalised_so_its_outputs_stay_in_their_folders(photos):
    """``img/k00/../../../x/z.jpg`` once kept its ``..`` in the image's id, and ``corrupt --render out/rend``
    wrote ``out/x/z.png``; the masks are named by the same id."""
    from bgbias.corrupted.render import png_target
    from bgbias.data.items import mask_path

    inside = photos / "in"
    (inside / "img" / "k00").mkdir(parents=True)
    outside = photos / "x"
    outside.mkdir()
    Image.open(photos / "a" / "0.png").save(outside / "z.png")
    for i in range(3):
        Image.open(photos / "a" / f"{i}.png").save(inside / "img" / "k00" / f"{i}.png")
    (inside / "images.csv").write_text("path,label\nimg/k00/0.png,0\nimg/k00/1.png,0\nimg/k00/2.png,1\n"
                                       "img/k00/../../../x/z.png,1\n")
    items = open_dataset("table", inside / "images.csv").items()
    assert all(".." not in item.relpath.parts for item in items)
    climbed = next(item for item in items if item.image == outside / "z.png")
    out, masks = photos / "out" / "rend", photos / "masks"
    for item in items:
        assert png_target(out, item).resolve().is_relative_to(out.resolve())
        assert mask_path(item, masks).resolve().is_relative_to(masks.resolve())
    assert climbed.id == "x/z.png"


def _samples(*values):
    """A torch Dataset (no ``targets``) whose sample ``i`` is ``values[i]``, or raises it when it is an
    exception."""
    import torch

    class Samples(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(values)

        def __getitem__(self, i: int):
            if isinstance(values[i], Exception):
                raise values[i]
            return values[i]

    return Samples()


@pytest.mark.parametrize("value", [
    "float tensor 255", "float array 255", "float tensor nan", "int tensor 300", "uint16 array"])
def test_out_of_range_pixels_are_refused_naming_the_sample_and_the_fix(value):
    import torch

    image = {"float tensor 255": torch.full((3, 8, 6), 200.0),
             "float array 255": np.full((8, 6, 3), 200.0),
             "float tensor nan": torch.full((3, 8, 6), float("nan")),
             "int tensor 300": torch.full((3, 8, 6), 300, dtype=torch.int64),
             "uint16 array": np.full((8, 6, 3), 40000, dtype=np.uint16)}[value]
    items = image_table(_samples((np.zeros((8, 6, 3), np.uint8), 0), (image, 1))).items()
    with pytest.raises(ImageError, match="outside") as raised:
        load_image(items[1].image)
    assert raised.value.path == "dataset[1]" and ("255" in raised.value.fix)


def test_in_range_pixels_of_any_type_give_the_same_image():
    import torch

    pixels = np.random.default_rng(0).integers(0, 256, (8, 6, 3), dtype=np.uint8)
    forms = [pixels, torch.from_numpy(pixels).permute(2, 0, 1).to(torch.int64), pixels / 255.0,
             torch.from_numpy(pixels).permute(2, 0, 1).float() / 255]
    items = image_table(_samples(*((form, 0) for form in forms))).items()
    for item in items:
        assert np.array_equal(np.asarray(load_image(item.image)), pixels), item.image


@pytest.mark.parametrize("form", ["exif", "cmyk", "sixteen-bit", "palette", "la"])
def test_a_datasets_opened_file_gives_the_pixels_of_the_same_file_as_a_row(tmp_path, form):
    from tests.data.test_images import EXIF_ORIENTATION, stripes

    path = tmp_path / ("photo.png" if form in ("sixteen-bit", "palette", "la") else "photo.jpg")
    picture = stripes()
    if form == "exif":
        exif = Image.Exif()
        exif[EXIF_ORIENTATION] = 6
        picture.save(path, exif=exif, quality=95)
    elif form == "cmyk":
        picture.convert("CMYK").save(path, quality=95)
    elif form == "sixteen-bit":
        Image.fromarray(np.asarray(picture.convert("L")).astype(np.uint16) * 257).save(path)
    elif form == "palette":
        palette = picture.convert("P", palette=Image.Palette.ADAPTIVE, colors=4)
        palette.info["transparency"] = 0
        palette.save(path, transparency=0)
    else:
        picture.convert("LA").save(path)
    from_file = load_image(image_table([(path, 0)]).items()[0].image)
    from_dataset = load_image(image_table(_samples((Image.open(path), 0))).items()[0].image)
    assert from_dataset.size == from_file.size and np.array_equal(np.asarray(from_dataset),
                                                                  np.asarray(from_file))


@pytest.mark.parametrize(("sample", "words"), [
    (KeyError("no such key"), r"dataset\[1\] raised KeyError"),
    ((np.zeros((4, 4, 3), np.uint8),), r"dataset\[1\] is a tuple of 1"),
])
def test_a_sample_that_cannot_be_read_for_its_label_is_named(sample, words):
    with pytest.raises(OptionError, match=words) as raised:
        image_table(_samples((np.zeros((4, 4, 3), np.uint8), 0), sample)).items()
    assert "__getitem__" in raised.value.fix


def test_csv_labels_are_text_so_7_and_007_are_two_classes(photos):
    labels = ["7", "007", "7", "007", "10", "10", "2", "2"]
    rows = "\n".join(f"{'a' if i < 4 else 'b'}/{i}.png,{label}" for i, label in enumerate(labels))
    (photos / "images.csv").write_text(f"path,label\n{rows}\n")
    items = open_dataset("table", photos / "images.csv").items()
    assert len({item.label for item in items}) == 4
    assert items[0].label != items[1].label and items[0].label == items[2].label


def test_integer_csv_labels_keep_their_values_as_classes(photos):
    rows = "\n".join(f"{'a' if i < 4 else 'b'}/{i}.png,{label}" for i, label in enumerate([3, 3, 7, 7, 10, 10,
                                                                                               -1, -1]))
    (photos / "images.csv").write_text(f"path,label\n{rows}\n")
    assert [item.label for item in open_dataset("table", photos / "images.csv").items()] == [
        3, 3, 7, 7, 10, 10, -1, -1]


def test_a_csv_with_a_byte_order_mark_is_read(photos):
    rows = "\n".join(f"a/{i}.png,{i // 2}" for i in range(4))
    (photos / "images.csv").write_text(f"path,label\n{rows}\n", encoding="utf-8-sig")
    assert [item.label for item in open_dataset("table", photos / "images.csv").items()] == [0, 0, 1, 1]
