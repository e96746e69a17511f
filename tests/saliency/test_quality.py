"""Mask quality as the paper measured it: foreground = value >= 128, IoU and overlap, and their summary."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from PIL import Image

from bgbias.saliency.quality import (
    Agreement,
    agreement,
    compare_with_truth,
    quality_report,
    summarise,
    truth_digest,
)


def rectangle(box, size=(10, 10), value=255, background=0) -> np.ndarray:
    """An 8-bit mask of ``size`` (h, w), ``value`` inside ``box`` = (top, left, bottom, right), exclusive."""
    mask = np.full(size, background, dtype=np.uint8)
    top, left, bottom, right = box
    mask[top:bottom, left:right] = value
    return mask


def test_iou_and_overlap_of_hand_made_masks():
    truth = rectangle((0, 0, 4, 5))  # 20 pixels
    predicted = rectangle((2, 0, 6, 5))  # 20 pixels, 10 of them on the truth
    result = agreement(predicted, truth)
    assert result.iou == pytest.approx(10 / 30)
    assert result.overlap == pytest.approx(10 / 20)


def test_a_prediction_covering_the_truth_has_full_overlap_but_lower_iou():
    truth = rectangle((2, 2, 4, 4))  # 4 pixels
    predicted = rectangle((0, 0, 5, 5))  # 25 pixels
    assert agreement(predicted, truth) == Agreement(iou=4 / 25, overlap=1.0)


def test_threshold_is_128_inclusive_on_both_masks():
    truth = rectangle((0, 0, 1, 4), size=(1, 4), value=128, background=127)  # all foreground
    predicted = np.array([[127, 128, 200, 0]], dtype=np.uint8)  # two of four foreground
    assert agreement(predicted, truth) == Agreement(iou=0.5, overlap=0.5)
    assert agreement(truth - 1, truth) == Agreement(iou=0.0, overlap=0.0)  # 127 everywhere: nothing


def test_undefined_measures_are_none_not_zero():
    empty = np.zeros((3, 3), dtype=np.uint8)
    assert agreement(empty, empty) == Agreement(iou=None, overlap=None)
    assert agreement(rectangle((0, 0, 1, 1), size=(3, 3)), empty) == Agreement(iou=0.0, overlap=None)


def test_shapes_must_match():
    with pytest.raises(ValueError, match="shapes"):
        agreement(np.zeros((2, 3), np.uint8), np.zeros((3, 2), np.uint8))


def test_summary_has_the_notebook_statistics():
    stats = summarise([0.0, 0.5, 0.75, 1.0])
    assert stats == {
        "n": 4,
        "mean": pytest.approx(0.5625),
        "std": pytest.approx(np.std([0.0, 0.5, 0.75, 1.0])),
        "min": 0.0,
        "q25": pytest.approx(0.375),
        "median": pytest.approx(0.625),
        "q75": pytest.approx(0.8125),
        "max": 1.0,
    }
    assert summarise([]) == {"n": 0}


def test_report_skips_undefined_values_and_lists_unreadable_truths():
    report = quality_report(
        [
            ("a", Agreement(iou=1.0, overlap=1.0)),
            ("b", Agreement(iou=0.5, overlap=None)),
            ("c", Agreement(error="image file is truncated or corrupt")),
        ]
    )
    assert report.images == 3
    assert report.iou["n"] == 2 and report.iou["mean"] == pytest.approx(0.75)
    assert report.overlap["n"] == 1
    assert report.errors == {"c": "image file is truncated or corrupt"}
    assert "IoU" in report.describe() and "1 ground-truth masks could not be read" in report.describe()
    assert quality_report([]) is None


def test_ground_truth_file_is_read_resized_to_the_mask_or_reported(tmp_path):
    predicted = Image.fromarray(rectangle((0, 0, 10, 5)))  # left half
    Image.fromarray(rectangle((0, 0, 20, 10), size=(20, 20))).save(tmp_path / "big.png")  # left half, 2×
    big = (tmp_path / "big.png").read_bytes()
    assert compare_with_truth(predicted, tmp_path / "big.png") == (
        Agreement(iou=1.0, overlap=1.0),
        hashlib.sha256(big).hexdigest(),
    )
    broken = b"\x89PNG\r\n\x1a\n broken"
    (tmp_path / "broken.png").write_bytes(broken)
    result, digest = compare_with_truth(predicted, tmp_path / "broken.png")
    assert result.iou is None and result.error
    assert digest == truth_digest(tmp_path / "broken.png") == hashlib.sha256(broken).hexdigest()
    assert compare_with_truth(predicted, tmp_path / "missing.png")[1] is None
    assert truth_digest(tmp_path / "missing.png") is None
