"""The evaluation geometry: sizes, offsets, image–mask alignment, soft masks, and parity with torchvision."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageDraw

from bgbias.data.transforms import (
    EvalGeometry,
    center_crop_box,
    eval_geometry,
    eval_transform,
    eval_transform_pair,
    resized_size,
)
from bgbias.errors import OptionError

# SEED: the evaluation geometry of the paper's code (docs/design.md, *Geometry*), not a random seed.
SEED = EvalGeometry(resize=256, crop=227)


def _drawn_pair(size: tuple[int, int], box: tuple[int, int, int, int]) -> tuple[Image.Image, Image.Image]:
    """A white rectangle on black, as an RGB image and as its L mask."""
    image = Image.new("RGB", size, (0, 0, 0))
    ImageDraw.Draw(image).rectangle(box, fill=(255, 255, 255))
    mask = Image.new("L", size, 0)
    ImageDraw.Draw(mask).rectangle(box, fill=255)
    return image, mask


def test_default_geometries():
    for name in ("cub", "cars", "sop", "folder"):
        assert eval_geometry(name) == SEED
    assert eval_geometry("bench") == EvalGeometry(128, 128)
    assert SEED.as_dict() == {"resize": 256, "crop": 227}


def test_unknown_dataset_and_impossible_geometry_are_option_errors():
    with pytest.raises(OptionError, match="imagenet"):
        eval_geometry("imagenet")
    with pytest.raises(OptionError, match="crop <= resize"):
        EvalGeometry(resize=128, crop=227)


@pytest.mark.parametrize(
    ("size", "expected"),
    [((500, 375), (341, 256)), ((375, 500), (256, 341)), ((300, 300), (256, 256)), ((100, 60), (426, 256))],
)
def test_shorter_side_is_resized_and_the_long_side_truncated(size, expected):
    assert resized_size(size, 256) == expected


def test_centre_crop_offsets_round_half_to_even():
    assert center_crop_box((256, 256), 227) == (14, 14, 241, 241)  # (256 − 227) / 2 = 14.5 → 14
    assert center_crop_box((341, 256), 227) == (57, 14, 284, 241)


@pytest.mark.parametrize("size", [(500, 375), (375, 500), (227, 227), (64, 48)])
def test_outputs_are_uint8_squares(size):
    image, mask = _drawn_pair(size, (10, 10, 30, 30))
    image_arr, mask_arr = eval_transform_pair(image, mask, SEED)
    assert image_arr.shape == (227, 227, 3) and image_arr.dtype == np.uint8
    assert mask_arr.shape == (227, 227) and mask_arr.dtype == np.uint8


@pytest.mark.parametrize("size", [(500, 375), (375, 500), (123, 311)])
def test_a_mask_drawn_on_the_image_lands_on_the_same_pixels(size):
    box = (size[0] // 5, size[1] // 3, size[0] // 2, size[1] * 3 // 4)  # off centre, to catch offset errors
    image, mask = _drawn_pair(size, box)
    image_arr, mask_arr = eval_transform_pair(image, mask, SEED)
    assert np.array_equal(image_arr[..., 0], mask_arr)
    assert 0 < (mask_arr > 127).mean() < 1


def test_the_mask_stays_soft():
    image, mask = _drawn_pair((500, 375), (100, 100, 300, 250))
    mask_arr = eval_transform_pair(image, mask, SEED)[1]
    assert np.any((mask_arr > 0) & (mask_arr < 255))


def test_native_size_geometry_is_the_identity():
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (128, 128, 3), dtype=np.uint8))
    assert np.array_equal(eval_transform(image, EvalGeometry(128, 128)), np.asarray(image))


def test_image_and_mask_must_have_one_size():
    image, _ = _drawn_pair((50, 40), (1, 1, 5, 5))
    with pytest.raises(ValueError, match="differ"):
        eval_transform_pair(image, Image.new("L", (40, 50)), SEED)


def test_same_pixels_as_the_seeds_torchvision_pipeline():
    """Resize(256) then CenterCrop(227) on a PIL image, as the paper's code's ValTransform does."""
    from torchvision import transforms
    rng = np.random.default_rng(1)
    for size in [(500, 375), (333, 500), (256, 300)]:
        image = Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
        expected = transforms.CenterCrop(227)(transforms.Resize(256)(image))
        assert np.array_equal(eval_transform(image, SEED), np.asarray(expected))


def test_the_interpolation_is_recorded_only_where_it_is_not_the_default():
    assert EvalGeometry(256, 227).as_dict() == {"resize": 256, "crop": 227}  # records and keys of before
    recorded = {"resize": 256, "crop": 227, "interpolation": "bicubic"}
    assert EvalGeometry(256, 227, "bicubic").as_dict() == recorded
    assert EvalGeometry(256, 227, "bicubic") != EvalGeometry(256, 227)
    assert EvalGeometry(256, 227, "bicubic").describe() == "resize=256, crop=227, interpolation=bicubic"
    with pytest.raises(OptionError, match="interpolation='nearest' is unknown") as err:
        EvalGeometry(256, 227, "nearest")
    assert err.value.fix == "choose one of bilinear, bicubic"


def test_a_bicubic_geometry_gives_torchvisions_bicubic_pixels_and_keeps_the_mask_bilinear():
    from torchvision import transforms
    bicubic = EvalGeometry(256, 227, "bicubic")
    rng = np.random.default_rng(2)
    for size in [(500, 375), (333, 500)]:
        image = Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
        resize = transforms.Resize(256, interpolation=transforms.InterpolationMode.BICUBIC)
        expected = np.asarray(transforms.CenterCrop(227)(resize(image)))
        assert np.array_equal(eval_transform(image, bicubic), expected)
        assert not np.array_equal(eval_transform(image, SEED), expected)
    image, mask = _drawn_pair((500, 375), (100, 100, 300, 250))
    bilinear_mask = eval_transform_pair(image, mask, SEED)[1]
    assert np.array_equal(eval_transform_pair(image, mask, bicubic)[1], bilinear_mask)
