"""The mask pipeline's mechanics with a fast fake session: outputs, records, resume, damage, shards."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bgbias.assets.digest import sha256_file
from bgbias.data.items import mask_path
from bgbias.data.registry import open_dataset
from bgbias.errors import OptionError, SkippedEntriesWarning
from bgbias.saliency.pipeline import shard_items, write_masks
from bgbias.saliency.records import MANIFEST_NAME, read_all_records, records_path
from tests.replicas import make_folder, write_picture
from tests.saliency.fakes import FakeSession, fake_info


class Stop(Exception):
    """Stands in for a kill: raised from ``on_record`` after a number of images."""


def stop_after(count: int):
    seen = []

    def callback(record):
        seen.append(record.id)
        if len(seen) == count:
            raise Stop

    return callback


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path → bytes)."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def run(items, out, session=None, **options):
    return write_masks(items, out, session or FakeSession(), progress=False, **options)


def test_writes_one_8bit_mask_per_image_at_its_size(bench_items, tmp_path):
    result = run(bench_items, tmp_path / "m")
    assert (result.images, result.written, result.skipped, result.failed) == (12, 12, 0, 0)
    for item in bench_items:
        mask = Image.open(mask_path(item, tmp_path / "m"))
        assert mask.mode == "L" and mask.size == Image.open(item.image).size
    manifest = json.loads((tmp_path / "m" / MANIFEST_NAME).read_text())
    assert manifest["counts"] == {"images": 12, "masks": 12, "failed": 0, "missing": 0, "empty": result.empty}
    assert manifest["model"]["name"] == "fake" and manifest["records"] == ["records/shard-0-of-1.jsonl"]


def test_interrupted_then_resumed_run_ends_byte_identical(bench_items, tmp_path):
    run(bench_items, tmp_path / "whole")
    with pytest.raises(Stop):
        run(bench_items, tmp_path / "resumed", on_record=stop_after(5))
    log = records_path(tmp_path / "resumed", (0, 1))
    assert len(log.read_text().splitlines()) == 5
    # What a kill can leave on top: a torn record line and a temporary mask file.
    with log.open("a") as handle:
        handle.write('{"id": "images/stamp_0')
    stale = mask_path(bench_items[-1], tmp_path / "resumed")
    stale.parent.mkdir(parents=True, exist_ok=True)
    (stale.parent / f".{stale.name}.k1ll3d00.tmp").write_bytes(b"half a png")
    (tmp_path / "resumed" / f".{MANIFEST_NAME}.k1ll3d01.tmp").write_bytes(b"{")

    session = FakeSession()
    result = run(bench_items, tmp_path / "resumed", session)
    assert (result.skipped, result.written) == (5, 7)
    assert session.calls == 7
    assert snapshot(tmp_path / "resumed") == snapshot(tmp_path / "whole")


def test_damaged_masks_are_redone_and_the_rest_kept(bench_items, tmp_path):
    out = tmp_path / "m"
    run(bench_items, out)
    before = snapshot(out)
    truncated, resized = (mask_path(item, out) for item in bench_items[:2])
    truncated.write_bytes(truncated.read_bytes()[:40])
    Image.new("L", (5, 5)).save(resized)
    log = records_path(out, (0, 1))
    lines = [line for line in log.read_text().splitlines() if json.loads(line)["id"] != bench_items[2].id]
    log.write_text("\n".join(lines) + "\n")

    session = FakeSession()
    result = run(bench_items, out, session)
    assert (result.written, result.skipped, session.calls) == (3, 9, 3)
    assert snapshot(out) == before


def test_shards_are_disjoint_cover_the_dataset_and_match_an_unsharded_run(bench_items, tmp_path):
    shards = [shard_items(bench_items, (index, 3)) for index in range(3)]
    ids = [item.id for shard in shards for item in shard]
    assert sorted(ids) == sorted(item.id for item in bench_items) and len(set(ids)) == len(ids)
    assert shard_items(list(reversed(bench_items)), (1, 3)) == shards[1]  # stable: only the ids matter

    run(bench_items, tmp_path / "whole")
    for index in range(3):
        result = run(bench_items, tmp_path / "sharded", shard=(index, 3))
        assert result.images == result.written == len(shards[index])
    whole, sharded = snapshot(tmp_path / "whole"), snapshot(tmp_path / "sharded")
    masks = {name for name in whole if name.endswith(".png")}
    assert masks == {name for name in sharded if name.endswith(".png")}
    assert all(whole[name] == sharded[name] for name in masks)
    assert sorted(n for n in sharded if n.endswith(".jsonl")) == [
        f"records/shard-{i}-of-3.jsonl" for i in range(3)
    ]
    counts = json.loads(sharded[MANIFEST_NAME])["counts"]
    assert counts["masks"] == 12 and counts["missing"] == 0


def test_after_a_first_shard_the_manifest_counts_the_rest_as_missing(bench_items, tmp_path):
    run(bench_items, tmp_path / "m", shard=(0, 2))
    counts = json.loads((tmp_path / "m" / MANIFEST_NAME).read_text())["counts"]
    assert (counts["masks"], counts["missing"]) == (6, 6)


@pytest.mark.parametrize("shard", [(2, 2), (-1, 2), (0, 0)])
def test_impossible_shards_are_refused(bench_items, tmp_path, shard):
    with pytest.raises(OptionError, match="shard"):
        run(bench_items, tmp_path / "m", shard=shard)


def test_a_bad_image_is_recorded_and_the_run_goes_on(bench_items, tmp_path):
    bad = bench_items[4]
    bad.image.write_bytes(b"\xff\xd8 this is not a JPEG")
    out = tmp_path / "m"
    result = run(bench_items, out)
    assert (result.written, result.failed) == (11, 1)
    assert not mask_path(bad, out).exists()
    record = read_all_records(out)[bad.id]
    assert not record.ok and "not an image" in record.error and record.fix
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert manifest["failures"] == [{"id": bad.id, "error": record.error, "fix": record.fix}]
    assert manifest["counts"]["failed"] == 1

    again = run(bench_items, out)  # failures are retried; the file is still bad
    assert (again.written, again.skipped, again.failed) == (0, 11, 1)


def test_another_model_may_not_write_into_the_same_folder(bench_items, tmp_path):
    run(bench_items, tmp_path / "m")
    other = FakeSession(fake_info(name="other", md5="1" * 32))
    with pytest.raises(OptionError) as caught:
        run(bench_items, tmp_path / "m", other)
    assert "model" in caught.value.problem and caught.value.path.endswith(MANIFEST_NAME)
    with pytest.raises(OptionError, match="empty_below"):
        run(bench_items, tmp_path / "m", empty_below=0.9)


def test_empty_flag_follows_the_raw_maximum(bench_items, tmp_path):
    out = tmp_path / "m"
    result = run(bench_items, out, empty_below=1.01)  # the fake's raw maximum never exceeds 1
    assert result.empty == 12
    records = read_all_records(out)
    assert all(r.empty and r.raw_max <= 1.0 for r in records.values())
    assert json.loads((out / MANIFEST_NAME).read_text())["counts"]["empty"] == 12


def test_quality_against_ground_truth_is_written_and_returned(bench_items, tmp_path):
    result = run(bench_items, tmp_path / "m")
    assert result.quality is not None and result.quality.images == 12
    saved = json.loads((tmp_path / "m" / "quality.json").read_text())
    assert saved["images"] == 12 and saved["threshold"] == 128
    records = read_all_records(tmp_path / "m")
    ious = [records[item.id].quality.iou for item in bench_items]
    assert saved["iou"]["mean"] == pytest.approx(float(np.mean(ious)))
    assert result.quality.iou == saved["iou"]


def test_no_ground_truth_no_quality_file(bench_items, tmp_path):
    from dataclasses import replace

    items = [replace(item, ground_truth_mask=None) for item in bench_items]
    result = run(items, tmp_path / "m")
    assert result.quality is None and not (tmp_path / "m" / "quality.json").exists()


def test_an_image_replaced_under_the_same_name_and_size_gets_a_new_mask(bench_items, tmp_path):
    out = tmp_path / "m"
    run(bench_items, out)
    changed = bench_items[3]
    before, size = mask_path(changed, out).read_bytes(), Image.open(changed.image).size
    write_picture(changed.image, 99)  # same name, same size, other picture
    assert Image.open(changed.image).size == size
    session = FakeSession()
    result = run(bench_items, out, session)
    assert (result.written, result.remade, result.skipped, session.calls) == (1, 1, 11, 1)
    assert "1 of the written masks were re-made" in result.describe()
    assert mask_path(changed, out).read_bytes() != before
    run(bench_items, tmp_path / "fresh")
    assert snapshot(out) == snapshot(tmp_path / "fresh")  # the same as a first run on the new images
    assert run(bench_items, out).written == 0


def test_a_changed_ground_truth_is_measured_again(bench_items, tmp_path):
    out = tmp_path / "m"
    run(bench_items, out)
    item = bench_items[5]
    Image.new("L", Image.open(item.ground_truth_mask).size, 255).save(item.ground_truth_mask)
    result = run(bench_items, out)
    assert (result.written, result.remade, result.skipped) == (1, 1, 11)
    assert read_all_records(out)[item.id].truth_sha256 == sha256_file(item.ground_truth_mask)
    run(bench_items, tmp_path / "fresh")
    assert snapshot(out) == snapshot(tmp_path / "fresh")


def test_each_image_file_is_read_once(bench_items, tmp_path, monkeypatch):
    """New masks decode the bytes that were hashed; a rerun only hashes (no image is decoded)."""
    opened = []
    original = Image.open

    def spy(source, *args, **kwargs):
        opened.append(source)
        return original(source, *args, **kwargs)

    monkeypatch.setattr(Image, "open", spy)
    images = {item.image for item in bench_items}
    run(bench_items, tmp_path / "m")
    assert not images & {source for source in opened if isinstance(source, Path)}
    opened.clear()
    assert run(bench_items, tmp_path / "m").skipped == 12
    assert not images & {source for source in opened if isinstance(source, Path)}


def test_a_folder_with_odd_entries_gets_every_usable_mask(tmp_path):
    """A name that is not UTF-8 and a looping link are named in a warning, never crash the run or hide a
    class folder; a rerun finds everything done."""
    root = make_folder(tmp_path / "pets", per_class=2)
    odd = Path(os.fsdecode(os.fsencode(root / "ant") + b"/caf\xe9.jpg"))
    odd.write_bytes((root / "ant" / "img_0.jpg").read_bytes())
    os.symlink("loop.jpg", root / "Bee" / "loop.jpg")
    with pytest.warns(SkippedEntriesWarning):
        items = open_dataset("folder", root).items()
    assert len(items) == 16
    assert run(items, tmp_path / "m").written == 16
    assert run(items, tmp_path / "m").skipped == 16
