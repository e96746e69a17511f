"""Registry: names, default roots under the data root, opening and summarising datasets."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from bgbias.data import registry
from bgbias.data.bench import BenchDataset
from bgbias.data.cub import CubDataset
from bgbias.data.folder import FolderDataset
from bgbias.data.items import Dataset
from bgbias.data.registry import DATASETS, dataset_names, default_root, open_dataset, summarize
from bgbias.data.train_geometry import TrainGeometry, train_geometry
from bgbias.data.transforms import EvalGeometry, eval_geometry
from bgbias.engine.config import protocol_layer, resolve_config
from bgbias.errors import DatasetError, OptionError
from tests.replicas import make_bench, make_cub, make_folder


def test_every_name_has_a_layout():
    assert dataset_names() == ("cub", "cars", "sop", "folder", "table", "bench")
    assert tuple(DATASETS) == dataset_names()
    assert all(DATASETS[name].name == name for name in dataset_names())


def test_default_roots_follow_the_data_root(tmp_path, monkeypatch):
    monkeypatch.setenv("BGBIAS_DATA", str(tmp_path))
    assert default_root("cub") == tmp_path / "CUB_200_2011"
    assert default_root("cars") == tmp_path / "cars196"
    assert default_root("sop") == tmp_path / "Stanford_Online_Products"
    assert default_root("bench") == tmp_path / "bench"


def test_folder_has_no_default_root():
    with pytest.raises(OptionError, match="no default location"):
        default_root("folder")
    with pytest.raises(OptionError, match="no default location"):
        open_dataset("folder")


def test_unknown_name():
    with pytest.raises(OptionError, match="unknown dataset 'cub200'") as info:
        open_dataset("cub200")
    assert "cub, cars, sop, folder, table, bench" in info.value.fix


def test_open_default_root(tmp_path, monkeypatch):
    monkeypatch.setenv("BGBIAS_DATA", str(tmp_path))
    make_cub(tmp_path / "CUB_200_2011", n_classes=2)
    dataset = open_dataset("cub")
    assert isinstance(dataset, CubDataset) and dataset.root == (tmp_path / "CUB_200_2011").resolve()


def test_open_missing_default_root_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("BGBIAS_DATA", str(tmp_path))
    with pytest.raises(DatasetError, match="not found") as info:
        open_dataset("sop")
    assert info.value.path == str(tmp_path / "Stanford_Online_Products")


def test_open_explicit_root(tmp_path):
    root = make_folder(tmp_path / "mine")
    assert isinstance(open_dataset("folder", root), FolderDataset)
    assert isinstance(open_dataset("bench", make_bench(tmp_path / "b")), BenchDataset)


def test_summarize(tmp_path):
    summary = summarize(open_dataset("bench", make_bench(tmp_path / "bench", per_class=3)))
    assert summary == {
        "name": "bench",
        "root": str((tmp_path / "bench").resolve()),
        "classes": 8,
        "images": 24,
        "protocol": "fixed",
        "splits": {
            "train": {"classes": 3, "images": 9},
            "val": {"classes": 2, "images": 6},
            "test": {"classes": 3, "images": 9},
        },
        "ground_truth_masks": 24,
    }


def test_summarize_cv4_fold_moves_validation_classes(tmp_path):
    dataset = open_dataset("bench", make_bench(tmp_path / "bench", per_class=3))
    fixed, fold0 = summarize(dataset), summarize(dataset, "cv4", 0)
    assert fold0["protocol"] == "cv4 fold 0"
    assert fold0["splits"]["test"] == fixed["splits"]["test"]
    trainval = lambda s: s["splits"]["train"]["classes"] + s["splits"]["val"]["classes"]  # noqa: E731
    assert trainval(fold0) == trainval(fixed) == 5


def test_summarize_tiny_folder_with_empty_splits(tmp_path):
    summary = summarize(open_dataset("folder", make_folder(tmp_path / "f", class_names=("a",))))
    assert summary["splits"]["val"] == {"classes": 0, "images": 0}
    assert summary["ground_truth_masks"] == 0


def test_default_output_key_names_published_datasets_by_name_wherever_they_are(tmp_path, monkeypatch):
    monkeypatch.setenv("BGBIAS_DATA", str(tmp_path / "data"))
    elsewhere = open_dataset("cub", make_cub(tmp_path / "copy" / "CUB_200_2011", n_classes=2))
    assert elsewhere.key == "cub"
    assert open_dataset("bench", make_bench(tmp_path / "data" / "bench")).key == "bench"


def test_default_output_keys_of_user_datasets_differ_by_root(tmp_path, monkeypatch):
    monkeypatch.setenv("BGBIAS_DATA", str(tmp_path / "data"))
    first = open_dataset("folder", make_folder(tmp_path / "a" / "shoes"))
    second = open_dataset("folder", make_folder(tmp_path / "b" / "shoes"))
    assert first.key.startswith("folder-shoes-") and second.key.startswith("folder-shoes-")
    assert first.key != second.key
    assert first.key == open_dataset("folder", tmp_path / "a" / "shoes").key  # stable
    other_bench = open_dataset("bench", make_bench(tmp_path / "variant"))
    assert other_bench.key.startswith("bench-variant-")


def test_identity_follows_images_and_labels_not_the_folder(tmp_path):
    first = open_dataset("folder", make_folder(tmp_path / "a"))
    copy = open_dataset("folder", make_folder(tmp_path / "b"))
    assert first.identity() == copy.identity()
    (tmp_path / "b" / "ant" / "extra.png").write_bytes((tmp_path / "b" / "ant").joinpath(
        sorted(p.name for p in (tmp_path / "b" / "ant").iterdir())[0]).read_bytes())
    assert open_dataset("folder", tmp_path / "b").identity() != first.identity()


@pytest.mark.parametrize("name", dataset_names())
def test_every_dataset_states_its_facts_beside_its_name(name):
    """Everything bgbias needs to know about a dataset is on its registered layout: nothing else is keyed by
    the dataset's name, so a new dataset is one module and its registration."""
    layout = DATASETS[name]
    assert layout.name == name and issubclass(layout, Dataset)
    assert isinstance(layout.index_file, str) and layout.obtain
    assert layout.default_folder is None or isinstance(layout.default_folder, str)
    assert eval_geometry(name) == layout.eval_geometry and isinstance(layout.eval_geometry, EvalGeometry)
    assert train_geometry(name) == layout.train_geometry and isinstance(layout.train_geometry, TrainGeometry)
    assert protocol_layer(name) == json.loads(
        (resources.files("bgbias") / "configs" / "protocols" / f"{layout.protocol}.json").read_text()
    )


def test_a_misspelt_dataset_is_answered_with_the_closest_name():
    with pytest.raises(OptionError, match="unknown dataset 'bnech'") as info:
        open_dataset("bnech")
    assert info.value.fix.startswith("did you mean 'bench'?")


def test_a_new_dataset_plugs_in_by_registering_a_layout(tmp_path, monkeypatch):
    """Geometry, protocol, default root and configuration all come from the registered class."""
    monkeypatch.setattr(registry, "DATASETS", registry.DATASETS.copy())
    monkeypatch.setenv("BGBIAS_DATA", str(tmp_path))

    @registry.register_dataset("toy")
    class ToyDataset(FolderDataset):
        default_folder = "toys"
        eval_geometry = EvalGeometry(resize=64, crop=60)
        train_geometry = TrainGeometry(resize=None, crop=60)
        protocol = "bench"

    assert ToyDataset.name == "toy" and dataset_names()[-1] == "toy"
    make_folder(tmp_path / "toys")
    toy = open_dataset("toy")
    assert isinstance(toy, ToyDataset) and toy.key == "toy" and summarize(toy)["name"] == "toy"
    assert eval_geometry("toy") == EvalGeometry(64, 60) and train_geometry("toy").crop == 60
    config, bench = resolve_config("triplet", "toy"), resolve_config("triplet", "bench")
    assert config.dataset == "toy" and config.optim == bench.optim and config.model == bench.model
    with pytest.raises(ValueError, match="registered twice"):
        registry.register_dataset("toy")(FolderDataset)
