"""The fills of an object's hole beside black and tiled: the dilated mask and OpenCV's inpainting, and the
profile's only-bg-inpainted variant that removes the object as the leakage meter does."""

from __future__ import annotations

import numpy as np
import pytest

from bgbias.errors import OptionError
from bgbias.variants.variants import (
    DILATION,
    INPAINT_RADIUS,
    VARIANTS,
    background_only,
    dilated_mask,
    dilation_radius,
    inpainted_background,
    render_variant,
    without_object,
)

SIDE = 24


def _scene(background_colour=(40, 120, 200), object_colour=(250, 250, 0)):
    """A flat background with a square object (rows and columns 8..15), its hard mask with a soft edge."""
    image = np.broadcast_to(np.uint8(background_colour), (SIDE, SIDE, 3)).copy()
    image[8:16, 8:16] = object_colour
    mask = np.zeros((SIDE, SIDE), np.uint8)
    mask[8:16, 8:16] = 255
    mask[7, 8:16] = 5  # below the object threshold: background
    return image, mask


def test_dilating_grows_the_object_by_the_radius_and_drops_the_faint_edge():
    _, mask = _scene()
    assert np.array_equal(dilated_mask(mask, 0), np.where(mask >= 13, 255, 0).astype(np.uint8))
    grown = dilated_mask(mask, 2)
    assert set(np.unique(grown)) == {0, 255}
    assert grown[6:18, 8:16].all() and grown[8:16, 6:18].all()
    assert not grown[5].any() and not grown[:, 5].any() and not grown[18:].any()


def test_inpainting_a_flat_background_paints_the_background_back():
    image, mask = _scene()
    filled = without_object(image, dilated_mask(mask, 1), "inpainted")
    assert np.abs(filled.astype(int) - np.array([40, 120, 200])).max() <= 3  # Telea rounds


def test_inpainting_leaves_no_silhouette_where_black_does():
    image, mask = _scene(background_colour=(90, 90, 90))
    hole = dilated_mask(mask, 1)
    assert np.ptp(without_object(image, hole, "black").reshape(-1, 3), axis=0).max() == 90
    assert np.ptp(without_object(image, hole, "inpainted").reshape(-1, 3), axis=0).max() <= 3


def test_inpainting_without_an_object_or_with_nothing_else_left():
    image, _ = _scene()
    assert np.array_equal(inpainted_background(image, np.zeros((SIDE, SIDE), np.uint8)), image)
    assert not inpainted_background(image, np.full((SIDE, SIDE), 255, np.uint8)).any()


def test_an_unknown_fill_is_refused_with_the_fills():
    image, mask = _scene()
    with pytest.raises(OptionError, match="unknown fill 'blur'") as err:
        without_object(image, mask, "blur")
    assert "black, tiled, inpainted" in err.value.fix


def _shape_scene(side=100, background_colour=(40, 120, 200), object_colour=(250, 250, 0)):
    """A flat background with a disc object (centre 50, 50, radius 20) and its mask, and a faint halo: the
    ring the dilation by 2 px (2 % of 100) adds round the disc, tinted with the object's colour, its mask
    below the object threshold (5 %), as a soft mask's edge leaves it. Returns the image, mask and ring."""
    rows, columns = np.mgrid[:side, :side]
    disc = np.hypot(rows - 50, columns - 50) <= 20
    image = np.broadcast_to(np.uint8(background_colour), (side, side, 3)).copy()
    mask = np.where(disc, np.uint8(255), np.uint8(0))
    ring = (dilated_mask(mask, 2) == 255) & ~disc
    image[disc] = object_colour
    image[ring] = (np.array(background_colour) + np.array(object_colour)) // 2
    mask[ring] = 8
    return image, mask, ring


def test_the_dilation_is_two_percent_of_the_crops_side_and_at_least_a_pixel():
    assert [dilation_radius(crop) for crop in (227, 128, 100, 24)] == [5, 3, 2, 1]


def test_only_bg_inpainted_leaves_a_flat_background_flat_silhouette_and_halo_gone():
    image, mask, ring = _shape_scene()
    out = render_variant("only-bg-inpainted", image, mask)
    # No shape left to read: Telea rounds by a few levels, where black leaves the disc 200 levels off.
    assert np.abs(out.astype(int) - np.array([40, 120, 200])).max() <= 4
    # The ring the dilation takes with the object: without it the halo would stay, an outline of the shape.
    assert ring.sum() > 100
    assert np.abs(without_object(image, mask, "inpainted")[ring].astype(int) - [40, 120, 200]).min() > 50
    assert np.array_equal(out, background_only(image, mask, "inpainted"))
    assert np.array_equal(out, without_object(image, dilated_mask(mask, 2), "inpainted"))


def test_only_bg_inpainted_of_an_image_without_an_object_or_all_object():
    image, _, _ = _shape_scene()
    assert np.array_equal(render_variant("only-bg-inpainted", image, np.zeros((100, 100), np.uint8)), image)
    assert not render_variant("only-bg-inpainted", image, np.full((100, 100), 255, np.uint8)).any()


def test_the_inpainted_variants_rule_states_the_dilation_and_the_inpainting():
    rule = VARIANTS["only-bg-inpainted"].rule
    assert f"radius max(1, round({DILATION} * crop)) px" in rule and "mask >= 13" in rule
    assert f"Telea inpainting (radius {INPAINT_RADIUS})" in rule
    assert VARIANTS["only-bg-inpainted"].title == "only-bg, inpainted"
