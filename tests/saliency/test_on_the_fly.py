"""Masks made on the fly are kept by what the image is, never by where an object happened to live."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from bgbias.saliency.on_the_fly import _image_key


def test_a_sample_is_keyed_by_its_pixels_and_a_file_by_its_stat(tmp_path):
    red = Image.fromarray(np.full((4, 6, 3), (255, 0, 0), dtype=np.uint8))
    blue = Image.fromarray(np.full((4, 6, 3), (0, 0, 255), dtype=np.uint8))
    # Two datasets' samples at one index: another picture is another key, the same picture the same key.
    assert _image_key(None, red) != _image_key(None, blue)
    assert _image_key(None, red) == _image_key(None, red.copy())
    red.save(tmp_path / "a.png")
    key = _image_key(tmp_path / "a.png", None)
    assert key[0] == str(tmp_path / "a.png") and key == _image_key(Path(tmp_path / "a.png"), None)
