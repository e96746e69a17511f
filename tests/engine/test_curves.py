"""A run's training curves: which columns are training terms, and the same picture for the same rows."""

from __future__ import annotations

import math

import pytest
from PIL import Image

from bgbias.engine.curves import plot_training_curves, training_terms

ROWS = [
    {"epoch": 0, "val_map_at_r": 0.30, "val_corrupted_map_at_r": 0.10},
    {"epoch": 1, "train_loss": 2.0, "train_erm": 1.5, "train_seconds": 9.0, "train_images_per_second": 50.0,
     "val_map_at_r": 0.40, "val_corrupted_map_at_r": 0.20},
    {"epoch": 2, "train_loss": 1.0, "train_erm": 0.5, "train_penalty": math.nan, "train_seconds": 8.0,
     "train_images_per_second": 55.0, "val_map_at_r": 0.45, "val_corrupted_map_at_r": 0.25},
]


def test_training_terms_are_the_numeric_train_columns_total_first():
    assert training_terms(ROWS) == ["train_loss", "train_erm"]
    assert training_terms(ROWS[:1]) == []


@pytest.mark.slow
def test_the_curves_are_a_png_with_the_same_bytes_for_the_same_rows(tmp_path):
    first = plot_training_curves(ROWS, tmp_path / "a.png", title="t", best_epoch=2, monitor="corrupted")
    second = plot_training_curves(ROWS, tmp_path / "b.png", title="t", best_epoch=2, monitor="corrupted")
    assert first.read_bytes() == second.read_bytes()
    width, height = Image.open(first).size
    assert width > 2 * height > 0


@pytest.mark.slow
def test_curves_are_drawn_before_any_epoch_and_with_negative_terms(tmp_path):
    rows = [ROWS[0], {**ROWS[1], "train_erm": -1.0}]
    plot_training_curves(ROWS[:1], tmp_path / "untrained.png", title="t", best_epoch=None, monitor="clean")
    plot_training_curves(rows, tmp_path / "negative.png", title="t", best_epoch=1, monitor="clean")
    assert (tmp_path / "untrained.png").is_file() and (tmp_path / "negative.png").is_file()
