"""Mask preflight: every training image's mask path, or one error naming the missing ones and the fix."""

from __future__ import annotations

import pytest

from bgbias.bgaugment.mask_check import saliency_masks
from bgbias.data.items import mask_path
from bgbias.errors import ImageError


def test_all_masks_present_gives_their_paths_in_item_order(bench, masks_dir):
    items = bench.items()
    paths = saliency_masks(items, masks_dir, "bench")
    assert paths == [mask_path(item, masks_dir) for item in items]
    assert all(path.is_file() for path in paths)


def test_missing_masks_are_one_error_with_count_examples_and_fix(bench, masks_dir):
    items = bench.items()
    gone = [mask_path(items[1], masks_dir), mask_path(items[4], masks_dir)]
    for path in gone:
        path.unlink()
    with pytest.raises(ImageError) as info:
        saliency_masks(items, masks_dir, "bench")
    error = info.value
    assert f"2 of {len(items)}" in error.problem
    assert all(str(path) in error.problem for path in gone)
    assert error.path == str(masks_dir)
    assert "bgbias masks --dataset bench" in error.fix and "(masks=DIR)" in error.fix
    assert "(--masks DIR)" in error.render({})


def test_a_missing_masks_folder_counts_every_mask(bench, tmp_path):
    items = bench.items()
    with pytest.raises(ImageError, match=f"{len(items)} of {len(items)}"):
        saliency_masks(items, tmp_path / "nowhere", "bench")


def test_a_mask_recorded_for_another_version_of_its_image_is_refused(bench, masks_dir):
    from bgbias.assets.digest import sha256_file
    from bgbias.saliency.records import MaskRecord, records_path, write_records

    items = bench.items()
    records = [MaskRecord(item.id, ok=True, size=(32, 24), image_sha256=sha256_file(item.image))
               for item in items[:3]]  # the others: masks a user brought, without records
    write_records(records_path(masks_dir, (0, 1)), records)
    assert saliency_masks(items, masks_dir, "bench") == [mask_path(item, masks_dir) for item in items]
    items[1].image.write_bytes(items[2].image.read_bytes())  # same name, same size, other picture
    with pytest.raises(ImageError, match=r"1 saliency masks .* other versions of their images") as info:
        saliency_masks(items, masks_dir, "bench")
    assert str(items[1].image) in info.value.problem and "bgbias masks --dataset bench" in info.value.fix


def _blank(path):
    """Overwrite the mask at ``path`` with one that shows no object: dim everywhere, no pixel at half."""
    from PIL import Image

    with Image.open(path) as mask:
        size = mask.size
    Image.new("L", size, 100).save(path)


def test_empty_masks_are_those_flagged_by_their_records_or_without_an_object(bench, masks_dir):
    from bgbias.bgaugment.mask_check import empty_masks
    from bgbias.saliency.records import MaskRecord, records_path, write_records

    items = bench.items()
    assert empty_masks(items, masks_dir) == []
    flagged, unflagged, blank_but_recorded_full, blank = items[0], items[1], items[2], items[5]
    made = {"ok": True, "size": (32, 24), "raw_min": 0.0, "image_sha256": "0" * 64}  # a mask's record
    write_records(records_path(masks_dir, (0, 1)), [
        MaskRecord(flagged.id, **made, raw_max=0.1, empty=True),
        MaskRecord(unflagged.id, **made, raw_max=0.9, empty=False),
        MaskRecord(blank_but_recorded_full.id, **made, raw_max=0.9, empty=False),
    ])
    _blank(mask_path(blank_but_recorded_full, masks_dir))  # where a record has a flag, the flag counts
    _blank(mask_path(blank, masks_dir))  # a mask brought along: its pixels count
    assert empty_masks(list(reversed(items)), masks_dir) == [blank.id, flagged.id]
