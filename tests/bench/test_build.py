"""The bench build: layout the reader expects, exact masks, home backgrounds under ρ, reproducible bytes."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bgbias.backgrounds.pool import assign_families
from bgbias.bench.build import (
    INDEX_HEADER,
    SPLIT_SHARES,
    build_bench,
    crop_scene,
    scene_canvas,
    split_classes,
)
from bgbias.bench.stamps import load_stamp
from bgbias.bench.views import ViewParams, render_view
from bgbias.errors import AssetError, ImageError, OptionError
from tests.backgrounds.test_pool import make_sources
from tests.bench.test_stamps import KEPT, make_stamps_tree


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    root = tmp_path_factory.mktemp("inputs")
    stamps = make_stamps_tree(root / "stamps")
    scenes = assign_families(make_sources(root / "sources", photos=5, patterns=4))["bench"]
    return stamps, scenes


@pytest.fixture(scope="module")
def bench(inputs: tuple[Path, list], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench") / "bench"
    build_bench(out, *inputs, seed=0, workers=1)
    return out


def _rows(bench: Path) -> list[dict[str, str]]:
    with open(bench / "index.csv", newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _views(bench: Path) -> list[dict]:
    return [json.loads(line) for line in (bench / "views.jsonl").read_text().splitlines()]


def _tree(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


@pytest.mark.slow
def test_index_is_well_formed_and_matches_the_files(bench: Path) -> None:
    header = (bench / "index.csv").read_text().splitlines()[0]
    assert tuple(header.split(",")) == INDEX_HEADER
    rows = _rows(bench)
    assert [r["image"] for r in rows] == sorted(r["image"] for r in rows)
    assert len(rows) == len(KEPT) * 8
    files = {p.relative_to(bench).as_posix() for p in bench.rglob("*") if p.is_file()}
    assert files == {r["image"] for r in rows} | {r["ground_truth_mask"] for r in rows} | {
        "index.csv",
        "bench.json",
        "views.jsonl",
    }
    classes: dict[str, tuple[str, str]] = {}
    for row in rows:
        assert row["image"] == f"images/{row['split']}/{row['class_name']}/{Path(row['image']).name}"
        assert row["ground_truth_mask"] == row["image"].replace("images/", "ground_truth/", 1)[:-4] + ".png"
        assert classes.setdefault(row["class_name"], (row["label"], row["split"])) == (
            row["label"],
            row["split"],
        )
        with Image.open(bench / row["image"]) as image, Image.open(bench / row["ground_truth_mask"]) as mask:
            assert image.format == "JPEG" and image.mode == "RGB" and image.size == (128, 128)
            assert mask.format == "PNG" and mask.mode == "L" and mask.size == (128, 128)
    assert len({label for label, _ in classes.values()}) == len(KEPT)
    assert {split for _, split in classes.values()} == set(SPLIT_SHARES)


@pytest.mark.slow
def test_description_records_parameters_inputs_and_summary(bench: Path, inputs: tuple[Path, list]) -> None:
    description = json.loads((bench / "bench.json").read_text())
    parameters, summary = description["parameters"], description["summary"]
    assert parameters["rho"] == 0.9 and parameters["preset"] == "small" and parameters["image_size"] == 128
    assert parameters["views_per_class"] == 8 and parameters["view_preset"] == "hard"
    assert [s["relpath"] for s in description["stamps"]] == sorted(KEPT)
    assert all(len(s["sha256"]) == 64 for s in description["stamps"] + description["scene_sources"])
    assert {s["origin"] for s in description["scene_sources"]} == {s.origin for s in inputs[1]}
    rows = _rows(bench)
    assert summary["images"] == {split: sum(r["split"] == split for r in rows) for split in SPLIT_SHARES}
    assert sum(summary["classes"].values()) == len(KEPT)
    masks = [np.asarray(Image.open(bench / r["ground_truth_mask"])) for r in rows]
    assert summary["mean_foreground_fraction"] == pytest.approx(
        np.mean([m.mean() / 255 for m in masks]), abs=1e-3
    )
    assert 0.03 < summary["mean_foreground_fraction"] < 0.6


def test_masks_are_the_exact_alpha_of_each_recorded_view(bench: Path, inputs: tuple[Path, list]) -> None:
    """Redraw views from views.jsonl alone: the saved mask is byte for byte the rendered alpha."""
    stamps_root, _ = inputs
    description = json.loads((bench / "bench.json").read_text())
    short_side = description["parameters"]["scene_canvas_short_side"]
    sources = {s.origin: s for s in inputs[1]}
    scenes = [
        Image.fromarray(scene_canvas(sources[s["origin"]].path, short_side))
        for s in description["scene_sources"]
    ]
    relpaths = {s["class_name"]: s["relpath"] for s in description["stamps"]}
    for record in _views(bench)[::5]:
        params = ViewParams(
            **{k: tuple(v) if isinstance(v, list) else v for k, v in record["params"].items()}
        )
        background = crop_scene(
            scenes[record["background"]["source"]], tuple(record["background"]["box"]), 128
        )
        stamp = load_stamp(stamps_root / relpaths[record["class_name"]])
        _, alpha = render_view(stamp, background, params, 128)
        np.testing.assert_array_equal(np.asarray(Image.open(bench / record["ground_truth_mask"])), alpha)


def _iou(a: list[int], b: list[int]) -> float:
    width = max(0, min(a[2], b[2]) - max(a[0], b[0]))
    height = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = width * height
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


@pytest.mark.slow
def test_rho_one_always_uses_the_home_region_and_rho_zero_never_forces_it(
    inputs: tuple[Path, list], tmp_path: Path
) -> None:
    build_bench(tmp_path / "always", *inputs, rho=1.0, workers=1)
    always = _views(tmp_path / "always")
    assert all(v["home"] for v in always)
    for view in always:
        background = view["background"]
        assert background["source"] == background["home_source"]
        assert _iou(background["box"], background["home_box"]) > 0.6

    build_bench(tmp_path / "never", *inputs, rho=0.0, workers=1)
    never = _views(tmp_path / "never")
    assert not any(v["home"] for v in never)
    near_home = [
        v["background"]["source"] == v["background"]["home_source"]
        and _iou(v["background"]["box"], v["background"]["home_box"]) > 0.6
        for v in never
    ]
    assert sum(near_home) / len(near_home) < 0.2
    summary = json.loads((tmp_path / "never" / "bench.json").read_text())["summary"]
    assert summary["home_view_fraction"] == 0.0 and summary["rho"] == 0.0


@pytest.mark.slow
def test_same_inputs_give_the_same_bytes_with_any_number_of_workers(
    inputs: tuple[Path, list], bench: Path, tmp_path: Path
) -> None:
    build_bench(tmp_path / "again", *inputs, seed=0, workers=2)
    assert _tree(tmp_path / "again") == _tree(bench)
    build_bench(tmp_path / "other", *inputs, seed=1, workers=1)
    assert _tree(tmp_path / "other") != _tree(bench)


def test_splits_are_seeded_and_cover_every_class() -> None:
    splits = split_classes(248, seed=0)
    assert splits == split_classes(248, seed=0) and splits != split_classes(248, seed=1)
    assert {name: splits.count(name) for name in SPLIT_SHARES} == {"train": 99, "val": 50, "test": 99}
    assert sorted(set(split_classes(3, seed=5))) == sorted(SPLIT_SHARES)


def test_bad_inputs_raise_errors_naming_the_path_and_fix(inputs: tuple[Path, list], tmp_path: Path) -> None:
    stamps, scenes = inputs
    with pytest.raises(AssetError, match="stamps folder not found") as caught:
        build_bench(tmp_path / "b", tmp_path / "missing", scenes)
    assert caught.value.path == str(tmp_path / "missing") and caught.value.fix
    with pytest.raises(AssetError, match="distinct scene pictures") as caught:
        build_bench(tmp_path / "b", stamps, scenes[:1])
    assert caught.value.path == str(Path(scenes[0].path).parent) and caught.value.fix
    with pytest.raises(OptionError, match="rho"):
        build_bench(tmp_path / "b", stamps, scenes, rho=1.5)
    with pytest.raises(OptionError, match="preset"):
        build_bench(tmp_path / "b", stamps, scenes, preset="huge")
    two = make_stamps_tree(tmp_path / "two", kept=KEPT[:2])
    with pytest.raises(AssetError, match="at least 3 usable stamps"):
        build_bench(tmp_path / "b", two, scenes)
    assert not (tmp_path / "b").exists()


def test_a_failure_midway_leaves_the_previous_bench_untouched(
    inputs: tuple[Path, list], tmp_path: Path
) -> None:
    stamps, _ = inputs
    scenes = assign_families(make_sources(tmp_path / "sources", photos=5, patterns=4))["bench"]
    out = tmp_path / "bench"
    build_bench(out, stamps, scenes, workers=1)
    before = _tree(out)
    broken = Path(scenes[-1].path)
    broken.write_bytes(broken.read_bytes()[:100])  # scenes are decoded inside the temporary bench folder
    with pytest.raises(ImageError) as caught:
        build_bench(out, stamps, scenes, workers=1, seed=1)
    assert caught.value.path == str(broken)
    assert _tree(out) == before
    # Nothing half-built is left, only the lock a second build waits on.
    assert sorted(p.name for p in tmp_path.iterdir()) == [".bench.lock", "bench", "sources"]
