"""The explain runner on a tiny bench with a random-weight MobileNetV2: files, summary, resume, settings
checks, the saliency-mask fallback and missing masks."""

from __future__ import annotations

import csv
import dataclasses
import json
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from bgbias.attribution.outputs import CSV_COLUMNS
from bgbias.attribution.run import ExplainInputs, explain_items
from bgbias.attribution.smoothgrad import SmoothGrad
from bgbias.corrupted.gallery import evenly_spread
from bgbias.data.registry import open_dataset
from bgbias.data.splits import split_items
from bgbias.data.transforms import EvalGeometry
from bgbias.engine.method_model import MethodModel
from bgbias.errors import ImageError, OptionError
from bgbias.measurement.request import MeasureRequest
from tests.attribution.tiny import baseline
from tests.replicas import copy_ground_truth_masks, make_bench
from tests.saliency.fakes import made_masks

GEOMETRY = EvalGeometry(resize=32, crop=32)
OPTIONS = {"copies": 4}


@pytest.fixture(scope="module")
def method():
    return baseline()


@pytest.fixture(scope="module")
def items(tmp_path_factory):
    root = make_bench(tmp_path_factory.mktemp("bench"), train_classes=1, val_classes=1, test_classes=3)
    return split_items(open_dataset("bench", root), "test")


def explain(method, items, out_dir, masks_dir=None, options=OPTIONS, seed=0, **overrides):
    inputs = ExplainInputs(items, GEOMETRY, "bench", masks_dir or out_dir.parent / "no-masks", out_dir)
    request = MeasureRequest(**{"attribution_options": options, "attribution_seed": seed, "batch_size": 2,
                                "gallery_count": 3, "progress": False, **overrides})
    return explain_items(MethodModel(method, torch.device("cpu")), inputs, request)


def read_csv(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def snapshot(out_dir):
    return {name: (out_dir / name).read_bytes() for name in ("scores.csv", "summary.json", "gallery.png",
                                                             "records.jsonl")}


@pytest.fixture(scope="module")
def reference(method, items, tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("reference") / "explain"
    return explain(method, items, out_dir)


def test_files_and_summary(reference, items):
    rows = read_csv(reference.scores_csv)
    assert tuple(rows[0]) == CSV_COLUMNS
    assert [row["id"] for row in rows] == [item.id for item in items]
    assert {row["mask_source"] for row in rows} == {"ground_truth"}
    scores = np.array([float(row["score"]) for row in rows])
    assert np.all(scores <= 1) and np.all(np.isfinite(scores))
    for row in rows:
        fraction, share = float(row["foreground_fraction"]), float(row["attribution_on_foreground"])
        assert float(row["score"]) == pytest.approx((share - fraction) / (1 - fraction), abs=2e-6)
    summary = json.loads((reference.out_dir / "summary.json").read_text())
    assert summary == reference.summary
    assert summary["attribution"] == "smoothgrad"
    assert summary["options"] == {"copies": 4, "noise": 0.15, "clip_percentile": 99.0, "batch": 50}
    assert (summary["seed"], summary["images"], summary["scored"], summary["undefined"]) == (0, 6, 6, 0)
    assert summary["mask_sources"] == {"ground_truth": 6, "saliency": 0}
    assert summary["masks"] is None and summary["mask_maker"] is None  # no saliency mask used
    assert summary["mean"] == pytest.approx(scores.mean(), abs=1e-6)
    assert summary["std"] == pytest.approx(scores.std(ddof=1), abs=1e-6)
    assert summary["median"] == pytest.approx(np.median(scores), abs=1e-6)
    with Image.open(reference.gallery) as gallery:
        assert gallery.format == "PNG" and gallery.size[0] == 3 * (128 + 4) + 4
    assert sorted(p.name for p in (reference.out_dir / "maps").rglob("*.png")) == ["0.png", "0.png", "1.png"]


def test_a_rerun_with_the_same_settings_recomputes_nothing(reference, method, items, monkeypatch):
    before = snapshot(reference.out_dir)
    monkeypatch.setattr(SmoothGrad, "__call__", lambda *args: pytest.fail("recomputed a finished image"))
    explain(method, items, reference.out_dir)
    assert snapshot(reference.out_dir) == before


def test_an_interrupted_run_resumes_to_the_same_files(reference, method, items, tmp_path, monkeypatch):
    calls = []
    original = SmoothGrad.__call__

    def interrupted(self, method, images01, generator):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(len(images01))
        return original(self, method, images01, generator)

    monkeypatch.setattr(SmoothGrad, "__call__", interrupted)
    out_dir = tmp_path / "explain"
    with pytest.raises(KeyboardInterrupt):
        explain(method, items, out_dir)
    assert len((out_dir / "records.jsonl").read_text().splitlines()) == 1 + 4  # header and 2 batches of 2
    assert not (out_dir / "scores.csv").exists()
    monkeypatch.setattr(SmoothGrad, "__call__", original)
    explain(method, items, out_dir)
    assert snapshot(out_dir) == snapshot(reference.out_dir)


def test_scores_do_not_depend_on_the_batch_size(reference, method, items, tmp_path):
    result = explain(method, items, tmp_path / "explain", batch_size=5)
    for ours, theirs in zip(read_csv(result.scores_csv), read_csv(reference.scores_csv), strict=True):
        assert float(ours["score"]) == pytest.approx(float(theirs["score"]), abs=1e-5)


def test_other_settings_are_refused_unless_forced(reference, method, items, tmp_path):
    out_dir = tmp_path / "explain"
    shutil.copytree(reference.out_dir, out_dir)
    with pytest.raises(OptionError, match=r"other settings \(options, seed\)") as raised:
        explain(method, items, out_dir, seed=3, options={"copies": 3})
    assert "force=True" in raised.value.fix and "--force" in raised.value.render({})
    with pytest.raises(OptionError, match="items_sha256"):
        explain(method, items[:4], out_dir)
    result = explain(method, items, out_dir, seed=3, force=True)
    assert result.summary["seed"] == 3
    assert result.scores_csv.read_bytes() != reference.scores_csv.read_bytes()


def test_a_foreign_folder_is_refused(method, items, tmp_path):
    out_dir = tmp_path / "explain"
    out_dir.mkdir()
    (out_dir / "notes.txt").write_text("mine")
    with pytest.raises(OptionError, match="holds no explain results"):
        explain(method, items, out_dir)


def test_items_without_ground_truth_use_their_saliency_masks(reference, method, items, tmp_path):
    masks_dir = made_masks(copy_ground_truth_masks(items[:3], tmp_path / "truth"), tmp_path / "masks")
    mixed = [dataclasses.replace(item, ground_truth_mask=None) for item in items[:3]] + items[3:]
    result = explain(method, mixed, tmp_path / "explain", masks_dir=masks_dir)
    rows = read_csv(result.scores_csv)
    assert [row["mask_source"] for row in rows] == ["saliency"] * 3 + ["ground_truth"] * 3
    assert result.summary["mask_sources"] == {"ground_truth": 3, "saliency": 3}
    assert result.summary["masks"] == str(masks_dir.resolve())
    assert result.summary["mask_maker"]["model"] == "u2netp"
    assert json.loads((tmp_path / "explain" / "summary.json").read_text()) == result.summary
    # The saliency masks here are copies of the ground truth, so the scores are the same.
    assert [row["score"] for row in rows] == [row["score"] for row in read_csv(reference.scores_csv)]


def test_missing_saliency_masks_fail_before_any_work(method, items, tmp_path):
    copy_ground_truth_masks(items[:2], tmp_path / "masks")
    bare = [dataclasses.replace(item, ground_truth_mask=None) for item in items]
    with pytest.raises(ImageError, match="4 of 6 saliency masks are missing") as raised:
        explain(method, bare, tmp_path / "explain", masks_dir=tmp_path / "masks")
    assert "bgbias masks --dataset bench" in raised.value.fix
    assert not (tmp_path / "explain").exists()


def test_a_deleted_gallery_map_is_computed_again(reference, method, items, tmp_path):
    out_dir = tmp_path / "explain"
    shutil.copytree(reference.out_dir, out_dir)
    shutil.rmtree(out_dir / "maps")
    explain(method, items, out_dir)
    assert snapshot(out_dir) == snapshot(reference.out_dir)


def test_undefined_scores_are_counted_and_left_out_of_the_statistics(method, items, tmp_path):
    whole = tmp_path / "whole.png"
    Image.new("L", (32, 24), 255).save(whole)
    changed = [dataclasses.replace(items[0], ground_truth_mask=whole), *items[1:]]
    result = explain(method, changed, tmp_path / "explain")
    rows = read_csv(result.scores_csv)
    assert rows[0]["score"] == "" and rows[0]["foreground_fraction"] == "1.000000"
    assert (result.summary["scored"], result.summary["undefined"]) == (5, 1)
    defined = [float(row["score"]) for row in rows[1:]]
    assert result.summary["mean"] == pytest.approx(np.mean(defined), abs=1e-6)
    assert result.summary["std"] == pytest.approx(np.std(defined, ddof=1), abs=1e-6)


def test_evenly_spread_picks_cover_the_items():
    assert evenly_spread(9, 3) == [0, 4, 8]
    assert evenly_spread(2, 16) == [0, 1]
    assert evenly_spread(5, 0) == []
