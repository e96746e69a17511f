"""Overlays and the attribution gallery: colours ordered by attribution, sheet layout, atomic PNG."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont

from bgbias.attribution.heatmap import (
    _shorten,
    _wrap,
    attribution_gallery,
    attribution_gallery_image,
    colour_ramp,
    overlay,
)


def luminance(rgb: np.ndarray) -> np.ndarray:
    return rgb.astype(np.float64) @ np.array([0.299, 0.587, 0.114])


def test_the_ramp_runs_from_black_to_pale_yellow_and_brightens_monotonically():
    colours = colour_ramp(np.linspace(0, 1, 50))
    assert tuple(colours[0]) == (0, 0, 4) and tuple(colours[-1]) == (252, 255, 164)
    assert np.all(np.diff(luminance(colours)) > 0)
    assert tuple(colour_ramp(np.array([np.nan, -1.0, 2.0]))[1]) == (0, 0, 4)
    assert tuple(colour_ramp(np.array([2.0]))[0]) == (252, 255, 164)


def test_overlay_greys_the_photo_and_brightens_with_attribution():
    image = np.zeros((4, 6, 3), np.uint8)
    image[..., 0] = 200  # a red photo
    attribution = np.tile(np.linspace(0, 1, 6), (4, 1))
    out = overlay(image, attribution)
    assert out.shape == image.shape and out.dtype == np.uint8
    assert np.all(np.diff(luminance(out[0])) > 0)
    zero = overlay(image, np.zeros((4, 6)))[0, 0].astype(int)
    assert abs(zero[0] - zero[1]) <= 1  # no red left: the photo is grey under the map


def test_overlay_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match="does not fit"):
        overlay(np.zeros((4, 6, 3), np.uint8), np.zeros((6, 4)))
    with pytest.raises(ValueError, match="uint8"):
        overlay(np.zeros((4, 6, 3)), np.zeros((4, 6)))


def test_gallery_has_a_row_per_image_and_a_column_per_model(tmp_path):
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (20, 30, 3), dtype=np.uint8) for _ in range(3)]
    masks = [np.full((20, 30), 255, np.uint8)] * 3
    maps = {"contrastive": [rng.random((20, 30)) for _ in range(3)], "triplet": [np.zeros((20, 30))] * 3}
    captions = ["a/1.jpg  contrastive 0.52  triplet 0.31", "b/2.jpg", "c/3.jpg " + "x" * 200]
    path = attribution_gallery(tmp_path / "sheets" / "gallery.png", images, masks, maps, captions, cell=40)
    assert path == tmp_path / "sheets" / "gallery.png"
    assert [p.name for p in path.parent.iterdir()] == ["gallery.png"]  # no temporary file left
    with Image.open(path) as sheet:
        assert sheet.format == "PNG"
        width, height = sheet.size
    assert width == 4 * (40 + 4) + 4
    assert height == 2 * 14 + 4 + 3 * (40 + 14 + 4)  # "contrastive" is wider than 40 px: two lines


def test_column_titles_are_whole_on_as_many_lines_as_they_need():
    # The quick study's page titled its BGAugment column "multi_sim...BGAugment" (issue 35).
    draw, font = ImageDraw.Draw(Image.new("RGB", (1, 1))), ImageFont.load_default()
    title = "multi_similarity + BGAugment"
    lines = _wrap(draw, title, 128, font)
    assert lines == ["multi_similarity +", "BGAugment"]
    assert all(draw.textlength(line, font=font) <= 128 for line in lines)
    assert _wrap(draw, "multi_similarity", 128, font) == ["multi_similarity"]
    long_word = "x" * 60  # wider than a line: cut at a character, nothing left out
    assert "".join(_wrap(draw, long_word, 128, font)) == long_word
    image = np.zeros((8, 8, 3), np.uint8)
    one_line = attribution_gallery_image([image], [image[..., 0]], {"ms": [image[..., 0]]}, ["a"])
    two_lines = attribution_gallery_image([image], [image[..., 0]], {title: [image[..., 0]]}, ["a"])
    assert two_lines.height == one_line.height + 14


def test_gallery_refuses_lists_of_different_lengths(tmp_path):
    image = np.zeros((8, 8, 3), np.uint8)
    with pytest.raises(ValueError, match="2 images but 1 masks"):
        attribution_gallery(tmp_path / "g.png", [image, image], [image[..., 0]], {}, ["a", "b"])
    with pytest.raises(ValueError, match="1 maps of m"):
        attribution_gallery(tmp_path / "g.png", [image] * 2, [image[..., 0]] * 2, {"m": [image[..., 0]]},
                            ["a", "b"])
    assert not (tmp_path / "g.png").exists()


def test_long_captions_keep_both_ends():
    text = "folder/" + "m" * 100 + "/file.jpg  score 0.42"
    short = _shorten(text, 120)
    assert len(short) == 20 and short.startswith("folder/") and short.endswith("0.42") and "..." in short
    assert _shorten("short", 120) == "short"
