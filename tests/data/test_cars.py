"""Cars196: reading cars_annos.mat, the paper's fixed split and every bad layout."""

from __future__ import annotations

import numpy as np
import pytest

from bgbias.data.cars import CarsDataset, class_id
from bgbias.data.splits import split_items
from bgbias.errors import DatasetError
from tests.replicas import make_cars


@pytest.fixture(scope="module")
def cars(tmp_path_factory):
    return CarsDataset(make_cars(tmp_path_factory.mktemp("data") / "cars196"))


def write_annotations(path, records):
    from scipy.io import savemat

    fields = ["relative_im_path", "class"]
    annotations = np.zeros((1, len(records)), dtype=[(name, "O") for name in fields])
    for index, record in enumerate(records):
        annotations[0, index] = record
    savemat(path, {"annotations": annotations})


def test_items_ids_and_labels(cars):
    items = cars.items()
    assert len(items) == 196
    assert items[0].id == "car_ims/000001.jpg" and items[0].label == 1
    assert items[-1].id == "car_ims/000196.jpg" and items[-1].label == 196
    assert items[0].image == cars.root / "car_ims" / "000001.jpg"
    assert all(item.ground_truth_mask is None for item in items)
    assert cars.class_names()[1] == "Car Model 1 2012" and cars.class_names()[196] == "Car Model 196 2012"


def test_fixed_split_matches_the_seed(cars):
    labels = {split: {item.label for item in split_items(cars, split)} for split in ("train", "val", "test")}
    assert labels["train"] == set(range(1, 75))
    assert labels["val"] == set(range(75, 99))
    assert labels["test"] == set(range(99, 197))
    assert cars.fixed_val_start() == 74


def test_several_images_per_class(tmp_path):
    dataset = CarsDataset(make_cars(tmp_path / "cars", n_classes=3, per_class=2))
    assert [item.label for item in dataset.items()] == [1, 1, 2, 2, 3, 3]


def test_root_given_as_image_folder(tmp_path):
    root = make_cars(tmp_path / "cars196", n_classes=2)
    with pytest.raises(DatasetError, match=r"no cars_annos.mat") as info:
        CarsDataset(root / "car_ims")
    assert str(root) in info.value.fix


def test_not_a_mat_file(tmp_path):
    root = make_cars(tmp_path / "cars", n_classes=2)
    (root / "cars_annos.mat").write_text("<html>404 not found</html>\n")
    with pytest.raises(DatasetError, match=r"cannot read cars_annos.mat") as info:
        CarsDataset(root).items()
    assert info.value.path == str(root / "cars_annos.mat")


def test_mat_file_without_annotations(tmp_path):
    from scipy.io import savemat

    root = make_cars(tmp_path / "cars", n_classes=2)
    savemat(root / "cars_annos.mat", {"class_names": np.array(["a", "b"], dtype=object)})
    with pytest.raises(DatasetError, match="relative_im_path, class"):
        CarsDataset(root).items()


@pytest.mark.parametrize("bad_class", [0, 197])
def test_class_out_of_range_names_the_annotation(tmp_path, bad_class):
    root = make_cars(tmp_path / "cars", n_classes=2)
    write_annotations(root / "cars_annos.mat", [("car_ims/000001.jpg", 1), ("car_ims/000002.jpg", bad_class)])
    with pytest.raises(DatasetError, match=f"annotation 2 of cars_annos.mat .* has class {bad_class}"):
        CarsDataset(root).items()


def test_a_single_annotation_is_read(tmp_path):
    root = make_cars(tmp_path / "cars", n_classes=1)
    assert [item.id for item in CarsDataset(root).items()] == ["car_ims/000001.jpg"]


def test_missing_image(tmp_path):
    root = make_cars(tmp_path / "cars", n_classes=3)
    (root / "car_ims" / "000002.jpg").unlink()
    with pytest.raises(DatasetError, match="1 of 3 images listed in the index are missing") as info:
        CarsDataset(root).items()
    assert "000002.jpg" in str(info.value)


@pytest.mark.parametrize(
    ("value", "expected"), [(np.uint8(5), 5), (196, 196), (0, None), ("x", None), (None, None)]
)
def test_class_id(value, expected):
    assert class_id(value) == expected


def test_without_class_names_a_class_is_named_by_its_id(tmp_path):
    root = make_cars(tmp_path / "cars", n_classes=2)
    write_annotations(root / "cars_annos.mat", [("car_ims/000001.jpg", 1), ("car_ims/000002.jpg", 2)])
    assert CarsDataset(root).class_names() == {1: "1", 2: "2"}
