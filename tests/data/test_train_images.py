"""TrainImages and the training geometry: one paired random geometry per draw, reproducible from the draw."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from bgbias.data.items import make_item
from bgbias.data.registry import open_dataset
from bgbias.data.samplers import MPerClassBatchSampler
from bgbias.data.train_geometry import (
    TrainGeometry,
    apply_train_transform,
    make_train_transform,
    train_geometry,
)
from bgbias.data.train_images import TrainImages
from bgbias.errors import ImageError, OptionError
from tests.replicas import make_bench

BACKGROUND = (20, 40, 60)
OBJECT = (230, 200, 10)
OBJECT_BOX = (4, 6, 15, 21)  # left, top, right, bottom (exclusive): off-centre, so a flip moves it
SMALL = TrainGeometry(resize=None, crop=16)


def write_pair(folder: Path, name: str, mask: np.ndarray | None = None, size=(40, 30)) -> tuple[Path, Path]:
    """An image with an object rectangle and, by default, its exact mask."""
    width, height = size
    pixels = np.zeros((height, width, 3), dtype=np.uint8)
    pixels[:] = BACKGROUND
    left, top, right, bottom = OBJECT_BOX
    pixels[top:bottom, left:right] = OBJECT
    if mask is None:
        mask = np.zeros((height, width), dtype=np.uint8)
        mask[top:bottom, left:right] = 255
    folder.mkdir(parents=True, exist_ok=True)
    image_path, mask_path = folder / f"{name}.png", folder / f"{name}-mask.png"
    Image.fromarray(pixels).save(image_path)
    Image.fromarray(mask).save(mask_path)
    return image_path, mask_path


def dataset_of(tmp_path: Path, geometry=SMALL, mask: np.ndarray | None = None, **kwargs) -> TrainImages:
    image_path, mask_path = write_pair(tmp_path, "a", mask)
    item = make_item(tmp_path, image_path.name, label=7)
    return TrainImages([item], geometry, [mask_path], **kwargs)


def test_a_draw_gives_uint8_tensors_label_and_index(tmp_path):
    sample = dataset_of(tmp_path)[(0, 123)]
    assert sample["image"].dtype == torch.uint8 and sample["image"].shape == (3, 16, 16)
    assert sample["mask"].dtype == torch.uint8 and sample["mask"].shape == (1, 16, 16)
    assert sample["label"] == 7 and sample["index"] == 0


def test_without_masks_there_is_no_mask_field(tmp_path):
    image_path, _ = write_pair(tmp_path, "a")
    sample = TrainImages([make_item(tmp_path, image_path.name, 0)], SMALL)[(0, 1)]
    assert "mask" not in sample


def test_same_draw_same_tensors_other_seed_other_tensors(tmp_path):
    dataset = dataset_of(tmp_path)
    first, again = dataset[(0, 5)], dataset[(0, 5)]
    assert torch.equal(first["image"], again["image"]) and torch.equal(first["mask"], again["mask"])
    others = [dataset[(0, seed)]["image"] for seed in range(6, 12)]
    assert any(not torch.equal(first["image"], other) for other in others)


@pytest.mark.parametrize(
    "geometry", [SMALL, TrainGeometry(resize=20, crop=16), TrainGeometry(resize=64, crop=24)]
)
def test_image_and_mask_share_the_geometry(tmp_path, geometry):
    """Resampled with the same weights, each pixel is the blend of the two colours its mask value says."""
    dataset = dataset_of(tmp_path, geometry)
    seen_both = 0
    for seed in range(40):
        sample = dataset[(0, seed)]
        image = sample["image"].permute(1, 2, 0).numpy().astype(float)
        alpha = sample["mask"][0].numpy()[..., None] / 255
        expected = alpha * np.array(OBJECT) + (1 - alpha) * np.array(BACKGROUND)
        assert np.abs(image - expected).max() <= 2.5
        seen_both += bool((alpha > 0.98).any() and (alpha < 0.02).any())
    assert seen_both >= 10


def test_the_mask_stays_soft(tmp_path):
    ramp = np.tile(np.linspace(0, 255, 40).astype(np.uint8), (30, 1))
    values = np.concatenate(
        [dataset_of(tmp_path, mask=ramp)[(0, s)]["mask"].numpy().ravel() for s in range(5)]
    )
    assert len(np.unique(values)) > 20
    constant = np.full((30, 40), 128, dtype=np.uint8)
    mask = dataset_of(tmp_path, TrainGeometry(resize=20, crop=16), mask=constant)[(0, 3)]["mask"]
    assert torch.all(mask == 128)


def test_flip_does_not_depend_on_the_crop_size():
    """albumentations' set_random_seed would tie the flip to the crop's first random number."""
    ys, xs = np.mgrid[0:64, 0:64]
    image = np.stack([xs * 4, ys * 4, np.zeros_like(xs)], axis=-1).astype(np.uint8)
    transform = make_train_transform(SMALL)
    areas, flips = [], []
    for seed in range(300):
        out, _ = apply_train_transform(transform, seed, image)
        red, green = out[..., 0].astype(int), out[..., 1].astype(int)
        flips.append(red[:, 0].mean() > red[:, -1].mean())
        areas.append(np.ptp(red) * np.ptp(green))
    flips, areas = np.array(flips), np.array(areas)
    small = areas < np.median(areas)
    assert 0.35 < flips[small].mean() < 0.65
    assert 0.35 < flips[~small].mean() < 0.65


def test_a_mask_of_another_size_is_an_image_error_with_the_fix(tmp_path):
    with pytest.raises(ImageError, match="differs from the size") as info:
        dataset_of(tmp_path, mask=np.zeros((10, 10), dtype=np.uint8), dataset_name="bench")[(0, 0)]
    assert info.value.path == str(tmp_path / "a-mask.png")
    assert "bgbias masks --dataset bench" in info.value.fix


def test_an_unreadable_image_is_an_image_error_naming_it(tmp_path):
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not a jpeg")
    with pytest.raises(ImageError) as info:
        TrainImages([make_item(tmp_path, "broken.jpg", 0)], SMALL)[(0, 0)]
    assert info.value.path == str(broken)


def test_default_geometries_and_bad_ones():
    assert train_geometry("cub") == TrainGeometry(resize=256, crop=227)
    assert train_geometry("bench") == TrainGeometry(resize=None, crop=128)
    with pytest.raises(OptionError, match="no training geometry"):
        train_geometry("imagenet")
    with pytest.raises(OptionError, match="scale"):
        TrainGeometry(resize=None, crop=16, scale=(0.5, 0.2))
    with pytest.raises(OptionError, match="flip_p"):
        TrainGeometry(resize=None, crop=16, flip_p=1.5)


def test_workers_give_the_same_batches_as_the_main_process(tmp_path):
    bench = open_dataset("bench", make_bench(tmp_path / "bench", per_class=4))
    items = bench.items()
    dataset = TrainImages(items, SMALL, [item.ground_truth_mask for item in items])
    sampler = MPerClassBatchSampler(
        [item.label for item in items], m=2, batch_size=4, seed=0, batches_per_epoch=4
    )

    def load(workers: int) -> list[dict]:
        loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler, num_workers=workers)
        return list(loader)

    main, parallel = load(0), load(2)
    assert len(main) == len(parallel) == 4
    for a, b in zip(main, parallel, strict=True):
        assert a["image"].shape == (4, 3, 16, 16) and a["mask"].shape == (4, 1, 16, 16)
        for key in ("image", "mask", "label", "index"):
            assert torch.equal(a[key], b[key])


@pytest.mark.slow
def test_importing_the_training_geometry_asks_pypi_nothing() -> None:
    """albumentations asks PyPI for a newer version when imported unless told not to: a network call on every
    start (a warning offline), and advice to upgrade to its AGPL successor."""
    script = (
        "import os, urllib.request\n"
        "os.environ.pop('NO_ALBUMENTATIONS_UPDATE', None)\n"
        "def refuse(self, url, *args, **kwargs):\n"
        "    raise SystemExit(f'asked the network for {getattr(url, \"full_url\", url)}')\n"
        "urllib.request.OpenerDirector.open = refuse\n"
        "import bgbias.data.train_geometry\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
