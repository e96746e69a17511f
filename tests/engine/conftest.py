"""A tiny bench with masks and a background pool, and a fast training configuration on it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bgbias.data.registry import open_dataset
from bgbias.engine.config import resolve_config
from tests.replicas import copy_ground_truth_masks, make_bench


@pytest.fixture(scope="session")
def tiny_bench(tmp_path_factory) -> Path:
    """A bench of 4 train and 2 val classes (4 views each), its masks and a 6-image background pool."""
    base = tmp_path_factory.mktemp("tiny-bench")
    root = make_bench(base / "bench", train_classes=4, val_classes=2, test_classes=1, per_class=4)
    copy_ground_truth_masks(open_dataset("bench", root).items(), base / "masks")
    pool = base / "backgrounds" / "train"
    pool.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(6):
        Image.fromarray(rng.integers(0, 256, (40 + 4 * i, 56, 3), dtype=np.uint8)).save(pool / f"bg{i}.png")
    return base


def tiny_config(base: Path, method: str = "triplet", *extra: str, epochs: int = 2):
    """Random-weight MobileNetV2 on 32-px crops, batches of 4 classes × 2, no worker processes."""
    return resolve_config(
        method, "bench",
        options={"root": str(base / "bench"), "bgaugment.masks": str(base / "masks"),
                 "bgaugment.backgrounds": str(base / "backgrounds")},
        overrides=[
            "model.pretrained=false", "model.embedding_dim=16", "data.batch_size=8", "data.m_per_class=2",
            "data.workers=0", "data.crop=32", f"schedule.epochs={epochs}", *extra,
        ],
    )
