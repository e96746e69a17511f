"""Evaluation datasets: clean images at the evaluation geometry, corrupted sets replayed from manifests."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from bgbias.corrupted import corrupted_images
from bgbias.corrupted.corrupted_images import CorruptedImages
from bgbias.corrupted.manifests import load_manifest, make_corrupted_manifests, remake_command
from bgbias.corrupted.render import render_entry
from bgbias.data.eval_images import EvalImages
from bgbias.data.images import load_image, load_mask
from bgbias.data.items import mask_path
from bgbias.data.registry import open_dataset
from bgbias.data.splits import split_items
from bgbias.data.transforms import eval_geometry, eval_transform
from bgbias.errors import DatasetError, ImageError
from tests.bgaugment.conftest import write_pool
from tests.replicas import copy_ground_truth_masks, make_bench


@pytest.fixture
def bench(tmp_path):
    return open_dataset("bench", make_bench(tmp_path / "bench", test_classes=3, per_class=3))


@pytest.fixture
def masks_dir(tmp_path, bench) -> Path:
    """The bench's exact masks copied to where ``bgbias masks`` writes saliency masks."""
    return copy_ground_truth_masks(bench.items(), tmp_path / "masks" / "bench")


@pytest.fixture
def backgrounds(tmp_path) -> Path:
    root = tmp_path / "backgrounds"
    write_pool(root / "test", seed=2)
    return root


@pytest.fixture
def manifest(bench, backgrounds, tmp_path):
    [path] = make_corrupted_manifests(
        bench, "test", repeats=1, seed=5, backgrounds=backgrounds, out_dir=tmp_path / "corrupted"
    )
    return load_manifest(path, bench, backgrounds)


@pytest.fixture
def test_items(bench):
    return split_items(bench, "test")


def _batches(dataset, workers: int) -> list[dict]:
    return list(DataLoader(dataset, batch_size=4, num_workers=workers))


def test_clean_images_equal_the_evaluation_transform(bench, test_items):
    geometry = eval_geometry("bench")
    dataset = EvalImages(test_items, geometry)
    assert len(dataset) == len(test_items) == 9
    for i, item in enumerate(test_items):
        sample = dataset[i]
        assert sample["image"].dtype == torch.uint8 and sample["image"].shape == (3, 128, 128)
        expected = eval_transform(load_image(item.image), geometry)
        assert np.array_equal(sample["image"].permute(1, 2, 0).numpy(), expected)
        assert (sample["label"], sample["index"]) == (item.label, i)


def test_corrupted_images_equal_render_entry(test_items, manifest, masks_dir):
    items = test_items[::-1]  # matched by id, not by position
    dataset = CorruptedImages(items, manifest, masks_dir, "bench")
    entry_of = {entry.id: entry for entry in manifest.entries}
    for i, item in enumerate(items):
        entry = entry_of[item.id]
        image, mask = load_image(item.image), load_mask(mask_path(item, masks_dir))
        background = load_image(manifest.pool_dir / entry.background)
        expected = render_entry(image, mask, background, entry, manifest.geometry)[2]
        sample = dataset[i]
        assert sample["image"].dtype == torch.uint8 and sample["image"].is_contiguous()
        assert np.array_equal(sample["image"].permute(1, 2, 0).numpy(), expected)
        assert (sample["label"], sample["index"]) == (item.label, i)
    clean = EvalImages(items, manifest.geometry)
    assert not torch.equal(dataset[0]["image"], clean[0]["image"])


@pytest.mark.slow
def test_two_workers_give_what_the_main_process_gives(test_items, manifest, masks_dir):
    for dataset in (
        EvalImages(test_items, manifest.geometry),
        CorruptedImages(test_items, manifest, masks_dir, "bench"),
    ):
        serial, parallel = _batches(dataset, 0), _batches(dataset, 2)
        assert len(serial) == len(parallel) == 3
        for one, other in zip(serial, parallel, strict=True):
            assert torch.equal(one["image"], other["image"])
            assert torch.equal(one["label"], other["label"]) and torch.equal(one["index"], other["index"])


def test_each_background_is_decoded_once(test_items, manifest, masks_dir, monkeypatch):
    decoded: list[str] = []

    def counting_load_image(path):
        decoded.append(Path(path).name)
        return load_image(path)

    monkeypatch.setattr(corrupted_images, "load_image", counting_load_image)
    dataset = CorruptedImages(test_items, manifest, masks_dir, "bench")
    for _ in range(2):
        for i in range(len(dataset)):
            dataset[i]
    used = {entry.background for entry in manifest.entries}
    assert len(used) > 1
    assert sorted(decoded) == sorted(used)


def test_an_item_missing_from_the_manifest_names_the_manifest_and_the_fix(test_items, manifest, masks_dir):
    shortened = dataclasses.replace(manifest, entries=manifest.entries[1:])
    with pytest.raises(DatasetError, match="no entry for 1 of the 9") as caught:
        CorruptedImages(test_items, shortened, masks_dir, "bench")
    assert caught.value.path == str(manifest.path)
    assert "bgbias corrupt --dataset bench --split test --seed 5" in caught.value.fix
    assert test_items[0].id in caught.value.problem


def test_the_fix_for_a_cross_validation_split_names_protocol_and_fold(manifest):
    fold = dataclasses.replace(manifest, split="val", protocol="cv4", fold=2)
    expected = "bgbias corrupt --dataset bench --split val --protocol cv4 --fold 2 --seed 5"
    assert remake_command(fold, "bench") == expected


def test_a_manifest_of_another_dataset_is_refused(test_items, manifest, masks_dir):
    with pytest.raises(DatasetError, match="for the bench dataset, not cub") as caught:
        CorruptedImages(test_items, manifest, masks_dir, "cub")
    assert caught.value.path == str(manifest.path)


def test_a_missing_mask_is_an_image_error_naming_it(test_items, manifest, masks_dir):
    dataset = CorruptedImages(test_items, manifest, masks_dir, "bench")
    gone = mask_path(test_items[2], masks_dir)
    gone.unlink()
    dataset[0]
    with pytest.raises(ImageError, match="no saliency mask") as caught:
        dataset[2]
    assert caught.value.path == str(gone)
    assert "bgbias masks --dataset bench" in caught.value.fix
