"""With the real u2netp: bgbias's masks are bit for bit rembg's ``only_mask`` output, EXIF orientation
included, and the raw range is what the network gives."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bgbias.data.images import load_image
from bgbias.data.items import Item, make_item, mask_path
from bgbias.saliency.pipeline import write_masks
from bgbias.saliency.records import read_all_records
from bgbias.saliency.sessions import default_threads
from bgbias.saliency.u2net import u2net_input

pytestmark = pytest.mark.slow  # the real u2netp network on full-size photos

PHOTOS = ("chelsea", "coffee", "astronaut")
EXIF_ORIENTATION = 0x0112
ROTATE_90_CW = 6
"""EXIF orientation 6: the stored pixels must be turned 90° clockwise to be upright."""


@pytest.fixture(scope="module")
def photo_dir(tmp_path_factory) -> Path:
    """The three scikit-image photos as JPEGs, plus chelsea stored sideways with an EXIF rotation tag."""
    import skimage.data

    folder = tmp_path_factory.mktemp("photos")
    for name in PHOTOS:
        Image.fromarray(getattr(skimage.data, name)()).save(folder / f"{name}.jpg", quality=92)
    sideways = Image.fromarray(skimage.data.chelsea()).transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[EXIF_ORIENTATION] = ROTATE_90_CW
    sideways.save(folder / "chelsea_exif.jpg", quality=92, exif=exif.tobytes())
    return folder


@pytest.fixture(scope="module")
def photo_items(photo_dir) -> list[Item]:
    return [make_item(photo_dir, path.name, 0) for path in sorted(photo_dir.glob("*.jpg"))]


@pytest.fixture(scope="module")
def masks_dir(tmp_path_factory, photo_items, u2netp_session) -> Path:
    out = tmp_path_factory.mktemp("masks")
    run = write_masks(photo_items, out, u2netp_session, progress=False)
    assert (run.written, run.failed) == (len(photo_items), 0)
    return out


def test_masks_equal_rembg_only_mask_bit_for_bit(photo_items, masks_dir, rembg_u2netp):
    import rembg

    for item in photo_items:
        theirs = rembg.remove(item.image.read_bytes(), session=rembg_u2netp, only_mask=True)
        ours = Image.open(mask_path(item, masks_dir))
        assert ours.mode == "L"
        np.testing.assert_array_equal(
            np.asarray(ours), np.asarray(Image.open(io.BytesIO(theirs))), err_msg=item.id
        )


def test_exif_rotated_photo_gets_its_mask_in_the_loaded_orientation(photo_dir, photo_items, masks_dir):
    stored = Image.open(photo_dir / "chelsea_exif.jpg").size
    upright = load_image(photo_dir / "chelsea_exif.jpg").size
    assert upright == stored[::-1] == Image.open(photo_dir / "chelsea.jpg").size
    exif_mask = np.asarray(Image.open(masks_dir / "chelsea_exif.png"))
    plain_mask = np.asarray(Image.open(masks_dir / "chelsea.png"))
    assert exif_mask.shape == plain_mask.shape == (upright[1], upright[0])
    # Same picture up to JPEG noise: the masks agree almost everywhere once both are upright.
    assert np.mean(np.abs(exif_mask.astype(int) - plain_mask.astype(int)) > 32) < 0.02


def test_records_hold_the_raw_output_range(photo_items, masks_dir, u2netp_session):
    records = read_all_records(masks_dir)
    item = photo_items[0]
    raw = u2netp_session.infer([u2net_input(load_image(item.image))])[0]
    assert records[item.id].raw_min == pytest.approx(float(raw.min()), abs=1e-6)
    assert records[item.id].raw_max == pytest.approx(float(raw.max()), abs=1e-6)
    assert all(0.0 <= r.raw_min < r.raw_max <= 1.0 for r in records.values())
    assert not any(r.empty for r in records.values())  # every one of these photos has a clear subject


def test_session_describes_the_model_file(u2netp_session, u2netp_file):
    info = u2netp_session.info
    assert (info.name, info.file, info.bytes) == ("u2netp", u2netp_file, 4_574_861)
    assert info.md5 == "8e83ca70e441ab06c318d82300c84806"  # rembg's own pin for u2netp
    assert info.provider == "CPUExecutionProvider"
    assert (info.streams, info.threads) == (1, default_threads(1))
