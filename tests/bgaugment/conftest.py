"""Shared fixtures: a tiny bench replica with saliency masks in place, and two small background pools."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bgbias.data.registry import open_dataset
from tests.replicas import copy_ground_truth_masks, make_bench

POOL_SIZES = [(64, 48), (48, 64), (80, 80), (100, 40)]


def write_pool(folder: Path, seed: int, sizes=POOL_SIZES) -> Path:
    """Noise pictures of assorted sizes (distinct content per seed), as PNG."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for index, (width, height) in enumerate(sizes):
        pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"bg-{index}.png")
    return folder


@pytest.fixture
def backgrounds(tmp_path) -> Path:
    root = tmp_path / "backgrounds"
    write_pool(root / "train", seed=1)
    write_pool(root / "test", seed=2)
    return root


@pytest.fixture
def bench(tmp_path):
    return open_dataset("bench", make_bench(tmp_path / "bench"))


@pytest.fixture
def masks_dir(tmp_path, bench) -> Path:
    """The bench's exact masks copied where ``bgbias masks`` would write saliency masks."""
    return copy_ground_truth_masks(bench.items(), tmp_path / "masks" / "bench")
