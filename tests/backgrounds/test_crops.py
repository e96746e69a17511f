"""Crop boxes: inside the source, of the asked aspect and area; crops have the asked size."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from bgbias.backgrounds.crops import crop_resized, output_size, sample_crop_box


@pytest.mark.parametrize("aspect", [16 / 9, 4 / 3, 1.0, 2 / 3])
def test_crop_box_fits_and_keeps_aspect_and_area(aspect: float) -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        left, top, right, bottom = sample_crop_box(rng, (800, 500), aspect, area=(0.2, 0.5))
        assert 0 <= left < right <= 800 and 0 <= top < bottom <= 500
        width, height = right - left, bottom - top
        assert width / height == pytest.approx(aspect, rel=0.02)
        assert width * height <= 0.5 * 800 * 500 + 1


def test_box_too_tall_for_a_panorama_is_shrunk_to_fit() -> None:
    left, top, right, bottom = sample_crop_box(np.random.default_rng(1), (1000, 100), 0.5, area=(0.5, 0.5))
    assert (top, bottom) == (0, 100)
    assert right - left == 50


def test_same_rng_same_box() -> None:
    boxes = [sample_crop_box(np.random.default_rng(5), (640, 480), 1.0) for _ in range(2)]
    assert boxes[0] == boxes[1]


def test_output_size_has_the_long_side_and_aspect() -> None:
    assert output_size(4 / 3, 640) == (640, 480)
    assert output_size(2 / 3, 640) == (427, 640)
    assert output_size(1.0, 64) == (64, 64)


def test_crop_resized_gives_the_asked_size_and_content() -> None:
    pixels = np.zeros((100, 200, 3), dtype=np.uint8)
    pixels[:, 100:] = 255
    crop = crop_resized(Image.fromarray(pixels), (120, 10, 180, 70), (30, 30))
    assert crop.size == (30, 30)
    assert np.asarray(crop).min() == 255
