"""Masks made on the fly are kept by what the image is, never by where an object happened to live."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
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


def test_the_backend_is_checked_when_the_spec_is_made():
    import pytest

    from bgbias import U2NetMasks
    from bgbias.errors import OptionError

    assert U2NetMasks(backend="torch").inference().backend == "torch"
    with pytest.raises(OptionError) as caught:
        U2NetMasks(backend="tpu")
    assert "auto, torch, onnxruntime" in caught.value.fix
    with pytest.raises(OptionError) as caught:  # no torch network for silueta: refused now, not when audited
        U2NetMasks(model="silueta", backend="torch")
    assert "backend=onnxruntime (or auto) for silueta" in caught.value.fix


@pytest.mark.slow
def test_torch_masks_are_made_on_the_fly(tmp_path, u2netp_file, monkeypatch):
    from bgbias import U2NetMasks
    from bgbias.data.table import ImageTable
    from bgbias.saliency import on_the_fly, sessions
    from tests.replicas import write_picture

    monkeypatch.setenv("U2NET_HOME", str(u2netp_file.parent))
    kept: dict = {}
    monkeypatch.setattr(on_the_fly, "_KEPT", kept)
    opened = []
    original = sessions.open_session

    def spy(*args, **kwargs):
        opened.append(original(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(on_the_fly, "open_session", spy)
    write_picture(tmp_path / "a.jpg", 1)
    table = ImageTable.from_rows([("a.jpg", "a", None)], tmp_path)
    masked = on_the_fly.with_u2net_masks(table, U2NetMasks("u2netp", device="cpu", backend="torch"))
    assert [session.info.backend for session in opened] == ["torch"]
    assert masked.items()[0].saliency_mask is not None
    [mask] = kept.values()
    assert mask.mode == "L" and mask.size == (32, 24)
