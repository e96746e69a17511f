"""Corrupted-set manifests (seeded, complete, validated against dataset and pool) and their rendering."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps

from bgbias.bgaugment.background_crops import apply_crop
from bgbias.corrupted.manifests import (
    SHARED_TEMP_AGE_S,
    default_manifest_dir,
    load_manifest,
    make_corrupted_manifests,
    sample_entries,
    split_pool_dir,
)
from bgbias.corrupted.render import LEDGER_NAME, render_corrupted, render_corrupted_sets
from bgbias.data.images import load_image, load_mask
from bgbias.data.items import mask_path
from bgbias.data.registry import open_dataset
from bgbias.data.splits import split_items
from bgbias.data.transforms import EvalGeometry, eval_transform_pair
from bgbias.errors import AssetError, DatasetError, ImageError, OptionError
from tests.bgaugment.conftest import write_pool
from tests.replicas import make_bench, make_cub


def _make(bench, backgrounds, out_dir, **options) -> list[Path]:
    return make_corrupted_manifests(bench, backgrounds=backgrounds, out_dir=out_dir, **options)


def _read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_same_seed_gives_byte_identical_manifests(bench, backgrounds, tmp_path):
    first = _make(bench, backgrounds, tmp_path / "a", repeats=3, seed=7)
    second = _make(bench, backgrounds, tmp_path / "b", repeats=3, seed=7)
    assert [p.name for p in first] == ["repeat-0.json", "repeat-1.json", "repeat-2.json"]
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]


def test_different_seeds_and_repeats_give_different_draws(bench, backgrounds, tmp_path):
    seed0 = _make(bench, backgrounds, tmp_path / "a", repeats=2, seed=0)
    seed1 = _make(bench, backgrounds, tmp_path / "b", repeats=2, seed=1)
    draws = [_read(p)["images"] for p in (*seed0, *seed1)]
    assert all(draws[i] != draws[j] for i in range(4) for j in range(i + 1, 4))


def test_a_repeat_does_not_depend_on_how_many_repeats_were_asked(bench, backgrounds, tmp_path):
    two = _make(bench, backgrounds, tmp_path / "a", repeats=2)
    three = _make(bench, backgrounds, tmp_path / "b", repeats=3)
    assert [p.read_bytes() for p in two] == [p.read_bytes() for p in three[:2]]


@pytest.mark.parametrize("split", ["val", "test"])
def test_every_image_of_the_split_appears_exactly_once(bench, backgrounds, tmp_path, split):
    manifest = _read(_make(bench, backgrounds, tmp_path, split=split, repeats=1)[0])
    ids = [entry["id"] for entry in manifest["images"]]
    assert ids == [item.id for item in split_items(bench, split)]
    assert manifest["header"]["count"] == len(ids)


def test_header_records_what_the_manifest_was_made_from(bench, backgrounds, tmp_path):
    header = _read(_make(bench, backgrounds, tmp_path, seed=3, repeats=2)[1])["header"]
    assert header["dataset"] == "bench" and header["split"] == "test"
    assert (header["seed"], header["repeat"]) == (3, 1)
    assert header["geometry"] == {"resize": 128, "crop": 128}
    assert header["background_crop"] == {"scale": [0.16, 1.0], "ratio": [0.75, 4 / 3], "flip_p": 0.5}
    assert [f["name"] for f in header["pool"]] == [f"bg-{i}.png" for i in range(4)]
    assert all(len(f["sha256"]) == 64 for f in header["pool"])
    assert len(header["ids_sha256"]) == 64


@pytest.mark.parametrize(("split", "pool"), [("val", "train"), ("test", "test")])
def test_val_draws_from_the_train_pool_and_test_from_the_test_pool(bench, backgrounds, tmp_path, split, pool):
    from bgbias.assets.digest import sha256_file

    header = _read(_make(bench, backgrounds, tmp_path, split=split, repeats=1)[0])["header"]
    expected = [sha256_file(p) for p in sorted((backgrounds / pool).iterdir())]
    assert [f["sha256"] for f in header["pool"]] == expected
    assert split_pool_dir(split, backgrounds) == backgrounds / pool


def test_a_single_folder_serves_as_the_pool(bench, tmp_path):
    pool = write_pool(tmp_path / "mine", seed=5)
    header = _read(_make(bench, pool, tmp_path / "out", repeats=1)[0])["header"]
    assert len(header["pool"]) == 4


def test_entries_name_pool_files_and_boxes_that_fit(bench, backgrounds, tmp_path):
    manifest = _read(_make(bench, backgrounds, tmp_path, repeats=1)[0])
    sizes = {f["name"]: (f["width"], f["height"]) for f in manifest["header"]["pool"]}
    for entry in manifest["images"]:
        left, top, width, height = entry["box"]
        w, h = sizes[entry["background"]]
        assert left >= 0 and top >= 0 and left + width <= w and top + height <= h
        assert isinstance(entry["flip"], bool)


def test_sampling_does_not_depend_on_the_order_of_images(bench, backgrounds):
    from bgbias.corrupted.manifests import describe_pool

    items = split_items(bench, "test")
    pool = describe_pool(backgrounds / "test")
    forward = sample_entries(items, pool, seed=0, repeat=0)
    backward = sample_entries(list(reversed(items)), pool, seed=0, repeat=0)
    assert forward == list(reversed(backward))


def test_default_location_is_beside_masks(bench, backgrounds, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paths = make_corrupted_manifests(bench, backgrounds=backgrounds, seed=4, repeats=1)
    assert paths == [Path("corrupted", bench.key, "test/seed-4/repeat-0.json")]
    assert paths[0].is_file()


def test_temporaries_of_a_killed_manifest_write_are_swept_once_stale(bench, backgrounds, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    old, live = out / ".repeat-0.json.k1ll3d.tmp", out / ".repeat-0.json.l1v3.tmp"
    old.write_text('{"header"')
    live.write_text('{"header"')  # a concurrent evaluation writing the same manifest right now
    os.utime(old, (time.time() - 2 * SHARED_TEMP_AGE_S, time.time() - 2 * SHARED_TEMP_AGE_S))
    _make(bench, backgrounds, out, repeats=1)
    assert sorted(p.name for p in out.iterdir()) == [live.name, "repeat-0.json"]


def test_bad_options_are_option_errors(bench, backgrounds, tmp_path):
    with pytest.raises(OptionError, match="val and test"):
        _make(bench, backgrounds, tmp_path, split="train")


def test_an_empty_pool_is_refused(bench, tmp_path):
    (tmp_path / "empty" / "test").mkdir(parents=True)
    with pytest.raises(DatasetError, match="no images"):
        _make(bench, tmp_path / "empty", tmp_path / "out")


# ---------------------------------------------------------------------------------------------- load_manifest
def test_load_manifest_round_trips(bench, backgrounds, tmp_path):
    path = _make(bench, backgrounds, tmp_path, seed=2, repeats=1)[0]
    manifest = load_manifest(path, bench, backgrounds)
    raw = _read(path)
    assert (manifest.dataset, manifest.split, manifest.seed, manifest.repeat) == ("bench", "test", 2, 0)
    assert manifest.pool_dir == backgrounds / "test"
    assert [e.model_dump() for e in manifest.entries] == raw["images"]


def test_load_manifest_rejects_a_changed_pool_file(bench, backgrounds, tmp_path):
    path = _make(bench, backgrounds, tmp_path, repeats=1)[0]
    Image.new("RGB", (64, 48), (1, 2, 3)).save(backgrounds / "test" / "bg-0.png")
    with pytest.raises(AssetError, match="changed") as err:
        load_manifest(path, bench, backgrounds)
    assert "bgbias corrupt --dataset bench" in err.value.fix


def test_load_manifest_rejects_an_added_or_removed_pool_file(bench, backgrounds, tmp_path):
    path = _make(bench, backgrounds, tmp_path, repeats=1)[0]
    Image.new("RGB", (30, 30)).save(backgrounds / "test" / "extra.png")
    with pytest.raises(AssetError, match=r"extra\.png"):
        load_manifest(path, bench, backgrounds)
    (backgrounds / "test" / "extra.png").unlink()
    (backgrounds / "test" / "bg-3.png").unlink()
    with pytest.raises(AssetError, match=r"missing: bg-3\.png"):
        load_manifest(path, bench, backgrounds)


def test_load_manifest_rejects_the_other_pool(bench, backgrounds, tmp_path):
    path = _make(bench, backgrounds, tmp_path, repeats=1)[0]
    with pytest.raises(AssetError, match="changed"):
        load_manifest(path, bench, backgrounds / "train")


def test_load_manifest_rejects_a_changed_dataset(bench, backgrounds, tmp_path):
    path = _make(bench, backgrounds, tmp_path, repeats=1)[0]
    index = bench.root / "index.csv"
    rows = list(csv.reader(index.open()))
    last_test = max(i for i, row in enumerate(rows) if row[3] == "test")
    with index.open("w", newline="") as handle:
        csv.writer(handle, lineterminator="\n").writerows(rows[:last_test] + rows[last_test + 1:])
    with pytest.raises(DatasetError, match="has changed") as err:
        load_manifest(path, open_dataset("bench", bench.root), backgrounds)
    assert "bgbias corrupt --dataset bench" in err.value.fix


def test_load_manifest_rejects_another_dataset(bench, backgrounds, tmp_path):
    path = _make(bench, backgrounds, tmp_path, repeats=1)[0]
    cub = open_dataset("cub", make_cub(tmp_path / "cub", n_classes=4, per_class=1))
    with pytest.raises(DatasetError, match="for the bench dataset, not cub"):
        load_manifest(path, cub, backgrounds)


@pytest.mark.parametrize(
    "damage",
    [
        lambda text: text[: len(text) // 2],
        lambda text: text.replace('"flip": ', '"flop": ', 1),
        lambda text: text.replace('"crop": 128', '"crop": "big"', 1),
    ],
    ids=["truncated", "malformed-entry", "malformed-geometry"],
)
def test_load_manifest_rejects_a_damaged_file(bench, backgrounds, tmp_path, damage):
    path = _make(bench, backgrounds, tmp_path, repeats=1)[0]
    path.write_text(damage(path.read_text()))
    with pytest.raises(AssetError):
        load_manifest(path, bench, backgrounds)


def _edit(path: Path, change) -> None:
    data = _read(path)
    change(data["header"], data["images"])
    path.write_text(json.dumps(data))


def _set(field, value):
    def change(header, images):
        target = images[0] if field in ("id", "background", "box", "flip") else header
        target[field] = value

    return change


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (_set("flip", "no"), r"images\[0\]\.flip"),
        (_set("flip", 0), r"images\[0\]\.flip"),
        (_set("id", 7), r"images\[0\]\.id"),
        (_set("background", "elsewhere.png"), r"images\[0\]\.background"),
        (_set("box", [-1, 0, 10, 10]), r"images\[0\]\.box\[0\]"),
        (_set("box", [0, 0, 0, 10]), r"images\[0\]\.box\[2\]"),
        (_set("box", [0, 0, 10.0, 10]), r"images\[0\]\.box\[2\]"),
        (_set("box", [0, "0", 10, 10]), r"images\[0\]\.box\[1\]"),
        (_set("box", [0, True, 10, 10]), r"images\[0\]\.box\[1\]"),
        (_set("box", [0, 0, 10]), r"images\[0\]\.box must be a list \[left, top, width, height\]"),
        (_set("box", [0, 0, 4000, 10]), r"images\[0\]\.box must be a box inside"),
        (lambda header, images: images[0].update(extra=1),
         r"images\[0\]\.extra must be absent \(the key is unknown\), got 1"),
        (lambda header, images: images.reverse(), "ids_sha256"),
        (_set("seed", "3"), r"header\.seed"),
        (_set("seed", True), r"header\.seed"),
        (_set("seed", -1), r"header\.seed"),
        (_set("repeat", 0.0), r"header\.repeat"),
        (_set("count", "6"), r"header\.count"),
        (_set("count", 5), "counts 5"),
        (_set("fold", 1), r"header\.fold must be at most 0 \(fixed\), got 1"),
        (_set("split", "train"), r"header\.split"),
        (_set("protocol", "cv5"), r"header\.protocol"),
        (_set("dataset", ""), r"header\.dataset must be a non-empty string"),
        (_set("ids_sha256", "abc"), r"header\.ids_sha256 must be a sha256 \(64 lower-case hex digits\)"),
        (_set("geometry", {"resize": 128, "crop": "big"}), r"header\.geometry\.crop"),
        (_set("geometry", {"resize": 128, "crop": 129}), r"header\.geometry\.crop"),
        (_set("geometry", {"resize": 128}),
         r"header\.geometry\.crop must be an integer, got nothing \(the field is missing\)"),
        (_set("background_crop", {"scale": [0.5, 1.0], "ratio": [0.75, 4 / 3], "flip_p": 0.5}),
         r"header\.background_crop"),
        (lambda header, images: header.pop("pool"),
         r"header\.pool must be a list of objects, got nothing \(the field is missing\)"),
        (lambda header, images: header.update(note="hi"),
         r'header\.note must be absent \(the key is unknown\), got "hi"'),
        (lambda header, images: header["pool"][0].update(width="64"), r"header\.pool\[0\]\.width"),
        (lambda header, images: header["pool"][0].update(sha256="xyz"), r"header\.pool\[0\]\.sha256"),
        (lambda header, images: header["pool"].append(dict(header["pool"][0])), "twice"),
    ],
)
def test_load_manifest_checks_every_field_strictly(bench, backgrounds, tmp_path, change, field):
    path = _make(bench, backgrounds, tmp_path, repeats=1)[0]
    _edit(path, change)
    with pytest.raises(AssetError, match=field) as err:
        load_manifest(path, bench, backgrounds)
    assert err.value.path == str(path)
    assert "bgbias corrupt" in err.value.fix


def test_load_manifest_refuses_a_key_given_twice(bench, backgrounds, tmp_path):
    path = _make(bench, backgrounds, tmp_path, repeats=1)[0]
    path.write_text(path.read_text().replace('"flip": true', '"flip": true, "flip": "no"', 1))
    with pytest.raises(AssetError, match="twice"):
        load_manifest(path, bench, backgrounds)


def test_load_manifest_refuses_pool_sizes_the_files_do_not_have(bench, backgrounds, tmp_path):
    path = _make(bench, backgrounds, tmp_path, repeats=1)[0]
    _edit(path, lambda header, images: [f.update(width=f["width"] * 10) for f in header["pool"]])
    with pytest.raises(AssetError, match="other sizes"):
        load_manifest(path, bench, backgrounds)


def test_load_manifest_refuses_another_evaluation_geometry(bench, backgrounds, tmp_path):
    path = _make(bench, backgrounds, tmp_path, repeats=1, geometry=EvalGeometry(160, 128))[0]
    with pytest.raises(AssetError, match="resize=160, crop=128; this evaluation uses resize=128") as err:
        load_manifest(path, bench, backgrounds)
    assert err.value.path == str(path)
    assert "make the manifests again: bgbias corrupt --dataset bench" in err.value.fix
    assert load_manifest(path, bench, backgrounds, EvalGeometry(160, 128)).geometry == EvalGeometry(160, 128)


def test_a_bicubic_geometry_is_recorded_in_its_manifest_and_folder_and_the_default_writes_none(
        bench, backgrounds, tmp_path):
    bicubic = EvalGeometry(128, 128, "bicubic")
    default = _make(bench, backgrounds, tmp_path / "a", repeats=1)[0]
    assert _read(default)["header"]["geometry"] == {"crop": 128, "resize": 128}  # its bytes of before
    path = _make(bench, backgrounds, tmp_path / "b", repeats=1, geometry=bicubic)[0]
    assert _read(path)["header"]["geometry"] == {"crop": 128, "interpolation": "bicubic", "resize": 128}
    assert _read(path)["images"] == _read(default)["images"]  # the same draws
    assert load_manifest(path, bench, backgrounds, bicubic).geometry == bicubic
    with pytest.raises(AssetError, match="resize=128, crop=128, interpolation=bicubic; this evaluation uses "
                                         r"resize=128, crop=128\b(?!,)"):
        load_manifest(path, bench, backgrounds)
    folder = default_manifest_dir(bench, "test", 0, geometry=bicubic)
    assert folder.name == "seed-0-resize128-crop128-bicubic"
    assert default_manifest_dir(bench, "test", 0, geometry=EvalGeometry(128, 128)).name == "seed-0"


def test_load_manifest_digests_the_bytes_it_read(bench, backgrounds, tmp_path):
    path = _make(bench, backgrounds, tmp_path, repeats=1)[0]
    assert load_manifest(path, bench, backgrounds).sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_load_manifest_names_the_command_for_a_missing_file(bench, tmp_path):
    with pytest.raises(AssetError, match="not found") as err:
        load_manifest(tmp_path / "nope.json", bench)
    assert "bgbias corrupt" in err.value.fix


# ---------------------------------------------------------------------------------------------- rendering
@pytest.fixture
def manifest(bench, backgrounds, tmp_path):
    return load_manifest(_make(bench, backgrounds, tmp_path / "manifests", repeats=1)[0], bench, backgrounds)


def _pngs(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*.png"))}


def test_rendering_twice_gives_identical_bytes(bench, manifest, masks_dir, tmp_path):
    first = render_corrupted(bench, manifest, masks_dir, tmp_path / "a")
    second = render_corrupted(bench, manifest, masks_dir, tmp_path / "b")
    assert first.written == second.written == len(manifest.entries)
    images = _pngs(tmp_path / "a")
    assert len(images) == len(manifest.entries) and images == _pngs(tmp_path / "b")


def test_rendered_images_composite_image_and_cropped_background(bench, manifest, masks_dir, tmp_path):
    render_corrupted(bench, manifest, masks_dir, tmp_path / "out")
    by_id = {item.id: item for item in bench.items()}
    for entry in manifest.entries:
        item = by_id[entry.id]
        rendered = np.asarray(Image.open(tmp_path / "out" / item.relpath.with_suffix(".png")))
        image, mask = eval_transform_pair(load_image(item.image), load_mask(mask_path(item, masks_dir)),
                                          manifest.geometry)
        background = apply_crop(load_image(manifest.pool_dir / entry.background), entry.crop_box, entry.flip,
                                128)
        assert rendered.shape == (128, 128, 3)
        assert np.array_equal(rendered[mask == 255], image[mask == 255])
        assert np.array_equal(rendered[mask == 0], background[mask == 0])
        soft = (mask > 0) & (mask < 255)
        alpha = mask[soft][:, None] / 255.0
        expected = alpha * image[soft] + (1 - alpha) * background[soft]
        assert np.abs(rendered[soft] - expected).max() <= 0.5 + 1e-6


def test_default_output_is_beside_the_manifest(bench, manifest, masks_dir):
    result = render_corrupted(bench, manifest, masks_dir)
    assert result.out_dir == manifest.path.with_suffix("")
    assert (result.out_dir / LEDGER_NAME).is_file()


def test_an_interrupted_render_resumes(bench, manifest, masks_dir, tmp_path):
    out = tmp_path / "out"
    render_corrupted(bench, manifest, masks_dir, out)
    reference = _pngs(out)
    first = sorted(out.rglob("*.png"))[0]
    first.unlink()
    result = render_corrupted(bench, manifest, masks_dir, out)
    assert (result.written, result.kept) == (1, len(manifest.entries) - 1)
    assert _pngs(out) == reference


def _item(bench, manifest, index: int = 0):
    return next(i for i in bench.items() if i.id == manifest.entries[index].id)


def _target(out: Path, item) -> Path:
    return out / item.relpath.with_suffix(".png")


def test_an_image_rendered_from_a_changed_mask_is_rendered_again(bench, manifest, masks_dir, tmp_path):
    out = tmp_path / "out"
    render_corrupted(bench, manifest, masks_dir, out)
    item = _item(bench, manifest, 2)
    before = _target(out, item).read_bytes()
    ImageOps.invert(load_mask(mask_path(item, masks_dir))).save(mask_path(item, masks_dir))
    result = render_corrupted(bench, manifest, masks_dir, out)
    assert (result.written, result.kept) == (1, len(manifest.entries) - 1)
    assert _target(out, item).read_bytes() != before
    assert _pngs(out) == _pngs(render_corrupted(bench, manifest, masks_dir, tmp_path / "fresh").out_dir)


def test_an_image_rendered_from_a_changed_photo_is_rendered_again(bench, manifest, masks_dir, tmp_path):
    out = tmp_path / "out"
    render_corrupted(bench, manifest, masks_dir, out)
    item = _item(bench, manifest, 1)
    before = _target(out, item).read_bytes()
    ImageOps.invert(load_image(item.image)).save(item.image, format="JPEG")
    result = render_corrupted(bench, manifest, masks_dir, out)
    assert (result.written, result.kept) == (1, len(manifest.entries) - 1)
    assert _target(out, item).read_bytes() != before
    assert _pngs(out) == _pngs(render_corrupted(bench, manifest, masks_dir, tmp_path / "fresh").out_dir)


def test_a_rendered_image_changed_by_hand_is_rendered_again(bench, manifest, masks_dir, tmp_path):
    out = tmp_path / "out"
    render_corrupted(bench, manifest, masks_dir, out)
    reference = _pngs(out)
    Image.new("RGB", (128, 128)).save(_target(out, _item(bench, manifest)))
    assert render_corrupted(bench, manifest, masks_dir, out).written == 1
    assert _pngs(out) == reference


def test_a_killed_render_resumes_to_the_same_bytes(bench, manifest, masks_dir, tmp_path):
    out = tmp_path / "out"
    render_corrupted(bench, manifest, masks_dir, out)
    reference, ledger = _pngs(out), (out / LEDGER_NAME).read_bytes()
    lines = ledger.decode().splitlines(keepends=True)
    # Killed while writing the 4th line: two images with full lines, one torn, the rest not rendered yet.
    (out / LEDGER_NAME).write_text("".join(lines[:3]) + lines[3][:20])
    for entry in manifest.entries[3:]:
        _target(out, _item(bench, manifest, manifest.entries.index(entry))).unlink()
    result = render_corrupted(bench, manifest, masks_dir, out)
    assert (result.written, result.kept) == (len(manifest.entries) - 2, 2)
    assert _pngs(out) == reference and (out / LEDGER_NAME).read_bytes() == ledger


def test_a_ledger_line_of_the_wrong_types_is_not_trusted(bench, manifest, masks_dir, tmp_path):
    out = tmp_path / "out"
    render_corrupted(bench, manifest, masks_dir, out)
    lines = (out / LEDGER_NAME).read_text().splitlines(keepends=True)
    record = json.loads(lines[1])
    (out / LEDGER_NAME).write_text(lines[0] + json.dumps({**record, "mask_sha256": True}) + "\n"
                                   + "".join(lines[2:]))
    assert render_corrupted(bench, manifest, masks_dir, out).written == 1


def test_temporaries_of_a_killed_render_are_swept(bench, manifest, masks_dir, tmp_path):
    out = tmp_path / "out"
    # Killed while writing the ledger's first line: the folder holds nothing but its temporary.
    (out / f".{LEDGER_NAME}.k1ll3d.tmp").parent.mkdir(parents=True)
    (out / f".{LEDGER_NAME}.k1ll3d.tmp").write_text('{"format"')
    render_corrupted(bench, manifest, masks_dir, out)
    target = _target(out, _item(bench, manifest))
    stale = target.with_name(f".{target.name}.x9y8z7.tmp")
    stale.write_bytes(b"\x89PNG half")
    target.unlink()
    assert render_corrupted(bench, manifest, masks_dir, out).written == 1
    assert not list(out.rglob(".*.tmp"))


def test_a_folder_of_another_render_is_not_mixed_into(bench, backgrounds, manifest, masks_dir, tmp_path):
    out = tmp_path / "out"
    render_corrupted(bench, manifest, masks_dir, out)
    other_path = _make(bench, backgrounds, tmp_path / "other", seed=9, repeats=1)[0]
    other = load_manifest(other_path, bench, backgrounds)
    with pytest.raises(OptionError, match="render of another corrupted-set manifest") as err:
        render_corrupted(bench, other, masks_dir, out)
    assert "--force" in err.value.fix
    result = render_corrupted(bench, other, masks_dir, out, force=True)
    assert result.written == len(other.entries)
    assert _pngs(out) == _pngs(render_corrupted(bench, other, masks_dir, tmp_path / "fresh").out_dir)


def test_a_stale_gallery_temporary_is_swept(bench, backgrounds, masks_dir, tmp_path):
    paths = _make(bench, backgrounds, tmp_path / "manifests", repeats=1)
    out = tmp_path / "rendered"
    out.mkdir()
    (out / ".gallery.png.k1ll3d.tmp").write_bytes(b"\x89PNG half")
    results, gallery = render_corrupted_sets(bench, paths, masks_dir, out, backgrounds, gallery_rows=2)
    assert [r.written for r in results] == [len(split_items(bench, "test"))] and gallery.is_file()
    assert not list(out.rglob("*.tmp"))


def test_rendering_against_another_dataset_is_refused(manifest, masks_dir, tmp_path):
    other = open_dataset("bench", make_bench(tmp_path / "other-bench", test_classes=1))
    with pytest.raises(DatasetError, match="does not describe"):
        render_corrupted(other, manifest, masks_dir, tmp_path / "out")


def test_a_missing_mask_names_the_masks_command(bench, manifest, masks_dir, tmp_path):
    item = next(i for i in bench.items() if i.id == manifest.entries[0].id)
    mask_path(item, masks_dir).unlink()
    with pytest.raises(ImageError, match="1 of 6 saliency masks are missing") as err:
        render_corrupted(bench, manifest, masks_dir, tmp_path / "out")
    assert "bgbias masks --dataset bench" in err.value.fix
    assert not (tmp_path / "out").exists()


def test_a_mask_of_the_wrong_size_is_an_image_error(bench, manifest, masks_dir, tmp_path):
    item = next(i for i in bench.items() if i.id == manifest.entries[0].id)
    Image.new("L", (10, 10)).save(mask_path(item, masks_dir))
    with pytest.raises(ImageError, match="mask size") as err:
        render_corrupted(bench, manifest, masks_dir, tmp_path / "out")
    assert "bgbias masks --dataset bench" in err.value.fix
