"""The fills of an object's hole beside black and tiled: the dilated mask and OpenCV's inpainting."""

from __future__ import annotations

import numpy as np
import pytest

from bgbias.errors import OptionError
from bgbias.variants.variants import dilated_mask, inpainted_background, without_object

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
