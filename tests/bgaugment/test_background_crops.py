"""Background crops: boxes inside the photo, the paper's code's scale/ratio ranges, fair flips and pool draws,
and draws fixed by (seed, repeat, image) whatever the processing order."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from bgbias.bgaugment.background_crops import (
    RATIO,
    SCALE,
    CropBox,
    apply_crop,
    image_rng,
    random_resized_box,
    sample_background_crop,
)

SIZES = [(1000, 800), (640, 427), (300, 900), (50, 50)]


def _boxes(size, count=500, seed=0):
    rng = np.random.default_rng(seed)
    return [random_resized_box(rng, size) for _ in range(count)]


@pytest.mark.parametrize("size", SIZES)
def test_boxes_lie_inside_the_background(size):
    assert all(box.fits(size) for box in _boxes(size))


def test_scale_and_ratio_ranges_are_respected():
    size = (1000, 800)
    boxes = _boxes(size, 2000)
    scales = np.array([b.width * b.height / (size[0] * size[1]) for b in boxes])
    ratios = np.array([b.width / b.height for b in boxes])
    tolerance = 0.01  # w and h are rounded to whole pixels
    assert scales.min() >= SCALE[0] - tolerance and scales.max() <= SCALE[1]
    assert ratios.min() >= RATIO[0] - tolerance and ratios.max() <= RATIO[1] + tolerance
    assert scales.min() < 0.2 and scales.max() > 0.9  # the range is used, not just respected
    assert ratios.min() < 0.78 and ratios.max() > 1.28


def test_box_positions_cover_the_background():
    boxes = _boxes((1000, 800), 2000)
    assert min(b.left for b in boxes) == 0 and min(b.top for b in boxes) == 0
    assert max(b.left + b.width for b in boxes) == 1000 and max(b.top + b.height for b in boxes) == 800


def test_an_elongated_background_falls_back_to_a_centred_crop_in_ratio():
    box = random_resized_box(np.random.default_rng(0), (1000, 10))
    assert box == CropBox(493, 0, 13, 10)  # width clamped to 4/3 of the height, centred


def test_flip_is_a_fair_coin_and_the_pool_is_drawn_uniformly():
    sizes = [(100, 80)] * 4
    crops = [sample_background_crop(image_rng(0, 0, f"img{i}"), sizes) for i in range(4000)]
    assert 0.46 < np.mean([c.flip for c in crops]) < 0.54
    counts = np.bincount([c.background for c in crops], minlength=4)
    assert counts.min() > 900 and counts.max() < 1100


def test_draws_are_fixed_by_seed_repeat_and_image():
    sizes = [(100, 80), (60, 90), (200, 200)]

    def draw(seed, repeat, image_id):
        return sample_background_crop(image_rng(seed, repeat, image_id), sizes)

    assert draw(0, 0, "a.jpg") == draw(0, 0, "a.jpg")
    others = {draw(1, 0, "a.jpg"), draw(0, 1, "a.jpg"), draw(0, 0, "b.jpg")}
    assert draw(0, 0, "a.jpg") not in others
    assert len(others) == 3


def test_draws_do_not_depend_on_processing_order():
    sizes = [(100, 80), (60, 90), (200, 200)]
    ids = [f"class/{i}.jpg" for i in range(50)]
    forward = {i: sample_background_crop(image_rng(3, 2, i), sizes) for i in ids}
    backward = {i: sample_background_crop(image_rng(3, 2, i), sizes) for i in reversed(ids)}
    assert forward == backward


def test_negative_seeds_are_refused():
    with pytest.raises(ValueError, match="non-negative"):
        image_rng(-1, 0, "a")


def _quadrants() -> Image.Image:
    """A 200×100 background: red left half, blue right half."""
    pixels = np.zeros((100, 200, 3), dtype=np.uint8)
    pixels[:, :100] = (255, 0, 0)
    pixels[:, 100:] = (0, 0, 255)
    return Image.fromarray(pixels)


def test_apply_crop_cuts_the_box_and_resizes_it():
    out = apply_crop(_quadrants(), CropBox(110, 10, 80, 60), flip=False, size=32)
    assert out.shape == (32, 32, 3) and out.dtype == np.uint8
    assert np.all(out == (0, 0, 255))


def test_apply_crop_flip_mirrors_horizontally():
    box = CropBox(60, 0, 80, 100)  # straddles the red/blue edge
    plain = apply_crop(_quadrants(), box, flip=False, size=40)
    mirrored = apply_crop(_quadrants(), box, flip=True, size=40)
    assert np.array_equal(mirrored, plain[:, ::-1])
    assert tuple(plain[20, 0]) == (255, 0, 0) and tuple(mirrored[20, 0]) == (0, 0, 255)


def test_apply_crop_refuses_a_box_outside_the_background():
    with pytest.raises(ValueError, match="does not fit"):
        apply_crop(_quadrants(), CropBox(150, 0, 80, 50), flip=False, size=16)
