"""The gallery sheet: cells where the layout says, captions checked, stable bytes, a real manifest drawn."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from bgbias.corrupted.gallery import gallery_image
from bgbias.corrupted.manifests import load_manifest, make_corrupted_manifests
from bgbias.corrupted.render import manifest_gallery
from bgbias.data.images import encoded


def _solid_rows(count: int, side: int = 20):
    rows = []
    for index in range(count):
        colour = np.array([10 * index, 255 - 10 * index, 100], dtype=np.uint8)
        image = np.broadcast_to(colour, (side, side, 3)).copy()
        mask = np.full((side, side), 20 * index, dtype=np.uint8)
        corrupted = np.broadcast_to(colour[::-1], (side, side, 3)).copy()
        rows.append((image, mask, corrupted))
    return rows


def test_cells_land_where_the_layout_puts_them():
    rows = _solid_rows(5)
    cell = 32
    sheet = gallery_image(rows, [f"row {i}" for i in range(5)], cell=cell, groups=2)
    block_w, row_h, top0 = 3 * (cell + 4) + 12, cell + 14 + 4, 14 + 4
    assert sheet.size == (2 * block_w, top0 + 3 * row_h)
    pixels = np.asarray(sheet)
    for index, row in enumerate(rows):
        group, slot = divmod(index, 3)
        for column, array in enumerate(row):
            x = group * block_w + column * (cell + 4) + 4 + cell // 2
            y = top0 + slot * row_h + cell // 2
            expected = array[0, 0] if array.ndim == 3 else (array[0, 0],) * 3
            assert tuple(pixels[y, x]) == tuple(expected)


def test_bad_rows_or_captions_raise():
    with pytest.raises(ValueError, match="at least one row"):
        gallery_image([])
    with pytest.raises(ValueError, match="captions"):
        gallery_image(_solid_rows(2), ["only one"])


def test_written_gallery_is_a_png_with_stable_bytes(tmp_path):
    a, b = (encoded(gallery_image(_solid_rows(4), [str(i) for i in range(4)]), format="PNG") for _ in "ab")
    assert a == b
    assert Image.open(io.BytesIO(a)).format == "PNG"


def test_manifest_gallery_draws_a_corrupted_set(bench, backgrounds, masks_dir, tmp_path):
    path = make_corrupted_manifests(bench, backgrounds=backgrounds, out_dir=tmp_path / "m", repeats=1)[0]
    manifest = load_manifest(path, bench, backgrounds)
    out = manifest_gallery(bench, manifest, masks_dir, tmp_path / "gallery.png", count=4, cell=40, groups=2)
    sheet = Image.open(out)
    assert sheet.size == (2 * (3 * 44 + 12), 18 + 2 * (40 + 18))
