"""The profile's variants as pure functions of pixels: what stays, what is removed, how the hole is filled."""

from __future__ import annotations

import numpy as np
import pytest

from bgbias.bgaugment.composite import composite_pixels
from bgbias.errors import OptionError
from bgbias.variants.variants import (
    VARIANTS,
    background_only,
    dilated_mask,
    dilation_radius,
    largest_strip,
    object_box,
    render_variant,
    tiled_background,
    without_object,
)

SIDE = 12


def _scene(box=(3, 4, 7, 9), object_colour=(200, 10, 10)):
    """A background that repeats every 3 columns (so tiling it continues it exactly), an object rectangle
    ``box`` = (top, left, bottom, right), its hard mask, and the background alone."""
    columns = np.array([[0, 0, 0], [90, 90, 90], [255, 128, 0]], dtype=np.uint8)
    background = np.broadcast_to(columns[np.arange(SIDE) % 3][None], (SIDE, SIDE, 3)).copy()
    image, mask = background.copy(), np.zeros((SIDE, SIDE), np.uint8)
    top, left, bottom, right = box
    image[top:bottom, left:right] = object_colour
    mask[top:bottom, left:right] = 255
    return image, mask, background


def test_only_fg_keeps_the_object_on_black():
    image, mask, _ = _scene()
    out = render_variant("only-fg", image, mask)
    assert np.array_equal(out[mask == 255], image[mask == 255])
    assert not out[mask == 0].any()


def test_only_bg_black_removes_the_object_and_keeps_the_background():
    image, mask, _ = _scene()
    out = render_variant("only-bg-black", image, mask)
    assert not out[mask == 255].any()
    assert np.array_equal(out[mask == 0], image[mask == 0])


def test_tiling_a_repeating_background_fills_the_hole_with_the_background_itself():
    image, mask, background = _scene()
    # The box (rows 3..6, columns 4..8) leaves the strip below (rows 7..11) as the largest: rows repeat.
    assert largest_strip(object_box(mask), mask.shape) == (7, 0, 5, SIDE)
    assert np.array_equal(render_variant("only-bg-tiled", image, mask), background)


def test_a_side_strip_tiles_from_where_it_starts():
    image, mask, _ = _scene(box=(0, 0, SIDE, 7))  # a full-height object: only the right strip
    assert largest_strip(object_box(mask), mask.shape) == (0, 7, SIDE, 5)
    filled = tiled_background(image, mask)
    assert np.array_equal(filled[:, 7:], image[:, 7:])
    # Tiled from column 7 with period 5: column 2 shows column 7 + (2 - 7) mod 5 = 7.
    assert np.array_equal(filled[:, 2], image[:, 7])


def test_strips_are_compared_by_area_ties_going_to_the_first():
    assert largest_strip((2, 2, 8, 8), (10, 10)) == (0, 0, 2, 10)  # above, below, left, right all 20 px
    assert largest_strip((0, 0, 10, 10), (10, 10)) is None
    assert object_box(np.zeros((4, 4), np.uint8)) is None
    assert object_box(np.array([[0, 12], [13, 0]], np.uint8)) == (1, 0, 2, 1)  # a 5 % halo is object


def test_without_a_strip_the_hole_takes_the_backgrounds_mean_colour():
    image, mask, _ = _scene(box=(0, 0, SIDE, SIDE))
    mask[0, 0] = 0  # one background pixel, inside the box the threshold finds
    image[0, 0] = (30, 60, 90)
    assert np.array_equal(tiled_background(image, mask), np.broadcast_to([30, 60, 90], image.shape))
    mask[0, 0] = 255
    assert not tiled_background(image, mask).any()


def test_without_an_object_the_image_is_its_own_background():
    image, _, _ = _scene()
    empty = np.zeros((SIDE, SIDE), np.uint8)
    assert np.array_equal(tiled_background(image, empty), image)
    assert np.array_equal(without_object(image, empty, "tiled"), image)


def test_mixed_pastes_the_object_on_the_donors_own_background():
    image, mask, _ = _scene(object_colour=(200, 10, 10))
    donor, donor_mask, donor_background = _scene(box=(5, 2, 9, 6), object_colour=(10, 200, 10))
    donor_background = 255 - donor_background  # another background, still repeating every 3 columns
    donor = np.where(donor_mask[..., None] == 255, donor, donor_background)
    out = render_variant("mixed-same", image, mask, donor, donor_mask)
    assert np.array_equal(out[mask == 255], image[mask == 255])
    assert np.array_equal(out[mask == 0], donor_background[mask == 0])
    assert render_variant("mixed-rand", image, mask, donor, donor_mask).tobytes() == out.tobytes()


def test_a_soft_mask_blends_as_the_one_composite_does():
    image, mask, _ = _scene()
    mask[3, 4] = 64  # a quarter of the object at this pixel
    out = render_variant("only-fg", image, mask)
    assert tuple(out[3, 4]) == tuple(np.round(np.array([200, 10, 10]) * 64 / 255).astype(int))


def test_mixed_variants_need_a_donor_and_names_are_checked():
    image, mask, _ = _scene()
    with pytest.raises(ValueError, match="needs a donor"):
        render_variant("mixed-rand", image, mask)
    with pytest.raises(OptionError, match="only-fg"):
        render_variant("only-bg", image, mask)
    assert list(VARIANTS) == ["repasted", "only-fg", "only-bg-tiled", "only-bg-black", "only-bg-inpainted",
                              "mixed-same", "mixed-rand"]


def _soft_scene():
    """A red square on a textured background (noise), its mask soft over the square's two outer rings."""
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)
    image[6:18, 6:18] = (200, 10, 10)
    mask = np.zeros((24, 24), np.uint8)
    mask[6:18, 6:18] = 80
    mask[7:17, 7:17] = 160
    mask[8:16, 8:16] = 255
    return image, mask


def test_repasted_is_the_object_blended_onto_its_own_inpainted_background():
    image, mask = _soft_scene()
    out = render_variant("repasted", image, mask)
    background = background_only(image, mask, "inpainted")
    assert np.array_equal(out, composite_pixels(image, mask, background))
    # The image itself wherever the blend cannot change it: the object's core and outside the dilated hole.
    hole = dilated_mask(mask, dilation_radius(24)) > 0
    assert np.array_equal(out[mask == 255], image[mask == 255])
    assert np.array_equal(out[~hole], image[~hole])
    # The soft rim mixes the object with the painted-in background, as a corrupted image mixes it with a new
    # one; the ring the dilation adds outside the mask is the painted-in background.
    rim = (mask > 0) & (mask < 255)
    assert not np.array_equal(out[rim], image[rim])
    assert np.array_equal(out[hole & (mask == 0)], background[hole & (mask == 0)])
