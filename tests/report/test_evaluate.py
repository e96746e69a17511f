"""`evaluate`: clean and corrupted scores of a run, the cache, the shared manifests, learned distances."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from bgbias.corrupted.manifests import make_corrupted_manifests
from bgbias.data.eval_images import EvalImages
from bgbias.data.items import mask_path
from bgbias.data.registry import open_dataset
from bgbias.data.splits import split_items
from bgbias.data.transforms import eval_geometry
from bgbias.engine.embedding import embed_images
from bgbias.engine.method_model import MethodModel
from bgbias.engine.run_dir import mark_latest, open_run_dir
from bgbias.engine.trained import load_trained
from bgbias.errors import AssetError, OptionError
from bgbias.measurement.request import MeasureRequest, requested_split
from bgbias.report.console import format_evaluation_summary
from bgbias.report.evaluate import evaluate
from bgbias.report.evaluation import load_evaluation_report
from bgbias.retrieval.metrics import score_embeddings
from bgbias.retrieval.retrievers import LearnedDistance
from tests.saliency.fakes import made_masks


def _evaluate(trained, bench, tmp_path, **options):
    log = options.pop("log", lambda _: None)
    settings = dict(corrupted=True, repeats=2, masks=bench / "masks", backgrounds=bench / "backgrounds",
                    manifests=tmp_path / "manifests", workers=0, progress=False)
    return evaluate(trained, MeasureRequest(**{**settings, **options}), log=log)


@pytest.fixture
def run(tiny_run, tmp_path):
    """A private copy of the tiny run, so a test may write its eval folder."""
    copy = tmp_path / "runs" / "run"
    shutil.copytree(tiny_run, copy)
    return copy


@pytest.mark.slow
def test_clean_scores_equal_scoring_a_fresh_embedding(run, tiny_bench, tmp_path):
    trained = load_trained(run, device="cpu")
    result = _evaluate(trained, tiny_bench, tmp_path)
    items = split_items(open_dataset("bench", tiny_bench / "bench"), "test")
    images = EvalImages(items, eval_geometry("bench"))
    embeddings, labels = embed_images(trained.method, images, trained.device)
    expected = score_embeddings(embeddings, labels)
    assert result.clean.map_at_r == pytest.approx(expected.map_at_r, abs=1e-12)
    assert result.report.clean.map_at_r == pytest.approx(expected.map_at_r, abs=1e-12)
    assert len(result.corrupted) == 2 and result.embedded == 3
    assert result.report.images == len(items) == 12
    assert result.report.checkpoint.sha256 == trained.checkpoint_sha256
    assert [m["repeat"] for m in result.report.corrupted_sets["manifests"]] == [0, 1]
    assert sorted(p.name for p in (tmp_path / "manifests").iterdir()) == ["repeat-0.json", "repeat-1.json"]
    for name in ("report_json", "report_md", "per_query_csv", "bars", "per_class_drop", "gallery"):
        assert result.files[name].is_file(), name
    assert load_evaluation_report(result.files["report_json"]) == result.report


@pytest.mark.slow
def test_corrupted_sets_change_the_images_and_differ_by_repeat(run, tiny_bench, tmp_path):
    result = _evaluate(load_trained(run, device="cpu"), tiny_bench, tmp_path)
    cache = sorted((run / "eval" / "cache").glob("*.npz"))
    stored = [np.load(path)["state.embedding"] for path in cache]
    assert len(stored) == 3
    assert not any(np.allclose(stored[i], stored[j]) for i in range(3) for j in range(i + 1, 3))
    assert result.report.corrupted.std.map_at_r is not None


@pytest.mark.slow
def test_the_report_is_checked_once_and_report_json_is_its_own_dump(run, tiny_bench, tmp_path, monkeypatch):
    from bgbias import schema

    checked = []
    adapter = schema._adapter

    def counting(shape):
        checked.append(shape)
        return adapter(shape)

    monkeypatch.setattr(schema, "_adapter", counting)
    result = _evaluate(load_trained(run, device="cpu"), tiny_bench, tmp_path)
    assert [shape.__name__ for shape in checked if shape is type(result.report)] == ["EvaluationReport"]
    written = json.loads(result.files["report_json"].read_text())
    assert written == json.loads(json.dumps(result.report.model_dump(exclude_unset=True)))


@pytest.mark.slow
def test_a_second_evaluation_reuses_the_cache_and_repeats_every_number(run, tiny_bench, tmp_path):
    trained = load_trained(run, device="cpu")
    first = _evaluate(trained, tiny_bench, tmp_path)
    before = {name: path.read_bytes() for name, path in first.files.items()}
    second = _evaluate(load_trained(run, device="cpu"), tiny_bench, tmp_path)
    assert second.embedded == 0
    assert {name: path.read_bytes() for name, path in second.files.items()} == before


@pytest.mark.slow
def test_a_changed_mask_embeds_the_corrupted_sets_again_but_not_the_clean_one(run, tiny_bench, tmp_path):
    masks = tmp_path / "masks"
    shutil.copytree(tiny_bench / "masks", masks)
    trained = load_trained(run, device="cpu")
    _evaluate(trained, tiny_bench, tmp_path, masks=masks)
    touched = mask_path(split_items(open_dataset("bench", tiny_bench / "bench"), "test")[0], masks)
    stat = touched.stat()
    os.utime(touched, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert _evaluate(trained, tiny_bench, tmp_path, masks=masks).embedded == 2


def test_without_corrupted_only_the_clean_set_is_scored(run, tiny_bench, tmp_path):
    result = _evaluate(load_trained(run, device="cpu"), tiny_bench, tmp_path, corrupted=False)
    assert result.corrupted == [] and result.report.corrupted is None
    assert not (tmp_path / "manifests").exists()


def _default_inputs(trained, tiny_bench, tmp_path, monkeypatch):
    """Work from ``tmp_path`` with the tiny bench's masks and pools where bgbias looks for them by default."""
    monkeypatch.chdir(tmp_path)
    dataset, _ = requested_split(trained, MeasureRequest())
    (tmp_path / "masks").mkdir()
    (tmp_path / "masks" / dataset.key).symlink_to(tiny_bench / "masks")
    (tmp_path / "backgrounds").symlink_to(tiny_bench / "backgrounds")
    return dataset


@pytest.mark.slow
def test_a_clean_only_evaluation_removes_the_corrupted_files_of_an_earlier_one(run, tiny_bench, tmp_path,
                                                                              monkeypatch):
    trained = load_trained(run, device="cpu")
    dataset = _default_inputs(trained, tiny_bench, tmp_path, monkeypatch)
    earlier = _evaluate(trained, tiny_bench, tmp_path, masks=None, backgrounds=None)
    later = _evaluate(trained, tiny_bench, tmp_path, masks=None, backgrounds=None, corrupted=False)
    assert later.out_dir == earlier.out_dir == run / "eval" / f"{dataset.key}-test"
    assert sorted(p.name for p in later.out_dir.iterdir()) == sorted(p.name for p in later.files.values())
    assert not earlier.files["per_class_drop"].exists()


@pytest.mark.slow
def test_other_pools_masks_and_seeds_get_report_folders_of_their_own(run, tiny_bench, tmp_path, monkeypatch):
    trained = load_trained(run, device="cpu")
    dataset = _default_inputs(trained, tiny_bench, tmp_path, monkeypatch)
    other_pool = tmp_path / "unsplash"
    shutil.copytree(tiny_bench / "backgrounds", other_pool)
    default = _evaluate(trained, tiny_bench, tmp_path, masks=None, backgrounds=None, repeats=1)
    pooled = _evaluate(trained, tiny_bench, tmp_path, masks=None, backgrounds=other_pool, repeats=1,
                       manifests=tmp_path / "other-manifests")
    seeded = _evaluate(trained, tiny_bench, tmp_path, masks=None, backgrounds=None, repeats=1, seed=3,
                       manifests=tmp_path / "seed-3")
    folders = [default.out_dir.name, pooled.out_dir.name, seeded.out_dir.name]
    assert folders[0] == f"{dataset.key}-test"
    assert folders[1].startswith(f"{dataset.key}-bg-unsplash-") and folders[1].endswith("-test")
    assert folders[2] == f"{dataset.key}-seed3-test"
    for result in (default, pooled, seeded):  # nothing written over
        read = load_evaluation_report(result.files["report_json"])
        assert read == result.report
    assert pooled.report.measured == folders[1].removesuffix("-test")


def test_the_cache_takes_labels_from_the_dataset_and_refuses_another_shape(run, tiny_bench, tmp_path):
    trained = load_trained(run, device="cpu")
    first = _evaluate(trained, tiny_bench, tmp_path, corrupted=False)
    (path,) = (run / "eval" / "cache").glob("*.npz")
    with np.load(path) as stored:
        key, embeddings = stored["key"], stored["state.embedding"]
    # Right key, other labels (as the old format stored them) and another width: never used as they are.
    np.savez(path, **{"state.embedding": np.zeros((len(embeddings), 3), np.float32)}, key=key,
             labels=np.zeros(len(embeddings), np.int64))
    logged = []
    second = _evaluate(trained, tiny_bench, tmp_path, corrupted=False, log=logged.append)
    assert second.embedded == 1 and any("cached embeddings ignored (shape" in line for line in logged)
    assert second.clean.map_at_r == first.clean.map_at_r
    with np.load(path) as stored:
        assert stored["state.embedding"].shape == embeddings.shape and "labels" not in stored


def test_the_latest_run_is_evaluated_when_none_is_named(run, tiny_bench, tmp_path):
    mark_latest(open_run_dir(run))
    trained = load_trained(runs=run.parent, device="cpu")
    assert trained.run.root == run and trained.epoch == 1
    assert load_trained(run / "checkpoints" / "last.pt", device="cpu").checkpoint.name == "last.pt"


def test_a_manifest_of_another_pool_is_reported_not_replaced(run, tiny_bench, tmp_path):
    dataset = open_dataset("bench", tiny_bench / "bench")
    other = tmp_path / "other-pool"
    shutil.copytree(tiny_bench / "backgrounds", other)
    (other / "test" / "bg0.png").unlink()
    make_corrupted_manifests(dataset, "test", repeats=1, backgrounds=other, out_dir=tmp_path / "manifests")
    written = (tmp_path / "manifests" / "repeat-0.json").read_bytes()
    with pytest.raises(AssetError, match="differs from the one the manifest was made with"):
        _evaluate(load_trained(run, device="cpu"), tiny_bench, tmp_path)
    assert (tmp_path / "manifests" / "repeat-0.json").read_bytes() == written


def test_a_manifest_of_another_seed_is_reported_before_any_is_written(run, tiny_bench, tmp_path):
    dataset = open_dataset("bench", tiny_bench / "bench")
    make_corrupted_manifests(dataset, "test", repeats=1, seed=3, backgrounds=tiny_bench / "backgrounds",
                             out_dir=tmp_path / "manifests")
    written = (tmp_path / "manifests" / "repeat-0.json").read_bytes()
    with pytest.raises(AssetError, match="another seed"):
        _evaluate(load_trained(run, device="cpu"), tiny_bench, tmp_path)
    assert (tmp_path / "manifests" / "repeat-0.json").read_bytes() == written
    assert not (tmp_path / "manifests" / "repeat-1.json").exists()


def test_a_manifest_copied_under_another_repeat_is_not_counted_twice(run, tiny_bench, tmp_path):
    dataset = open_dataset("bench", tiny_bench / "bench")
    folder = tmp_path / "manifests"
    pool = tiny_bench / "backgrounds"
    make_corrupted_manifests(dataset, "test", repeats=1, backgrounds=pool, out_dir=folder)
    shutil.copy(folder / "repeat-0.json", folder / "repeat-1.json")
    with pytest.raises(AssetError, match="named for repeat 1 of the test split but holds repeat 0") as err:
        _evaluate(load_trained(run, device="cpu"), tiny_bench, tmp_path)
    assert err.value.path == str(folder / "repeat-1.json")


@pytest.mark.slow
def test_reported_manifest_digests_are_of_the_files_left_on_disk(run, tiny_bench, tmp_path):
    dataset = open_dataset("bench", tiny_bench / "bench")
    folder = tmp_path / "manifests"
    # Repeat 0 made for the test split under another protocol: making repeat 1 rewrites its header.
    make_corrupted_manifests(dataset, "test", repeats=1, backgrounds=tiny_bench / "backgrounds",
                             out_dir=folder, protocol="cv4", fold=1)
    result = _evaluate(load_trained(run, device="cpu"), tiny_bench, tmp_path)
    for manifest in result.report.corrupted_sets["manifests"]:
        assert manifest["sha256"] == hashlib.sha256(Path(manifest["path"]).read_bytes()).hexdigest()


def test_a_learned_distance_ranks_the_evaluation(run, tiny_bench, tmp_path):
    trained = load_trained(run, device="cpu")
    weights = torch.randn(16, 16, generator=torch.Generator().manual_seed(0))
    trained.method.retrieval = lambda: LearnedDistance(lambda q, r: -(q @ weights @ r.T))
    result = _evaluate(trained, tiny_bench, tmp_path, corrupted=False)
    cached = np.load(next((run / "eval" / "cache").glob("*.npz")))
    state = torch.from_numpy(cached["state.embedding"])
    full = (-(state @ weights @ state.T)).numpy()
    np.fill_diagonal(full, np.inf)
    items = split_items(open_dataset("bench", tiny_bench / "bench"), "test")
    labels = np.array([item.label for item in items])
    nearest = np.argsort(full, axis=1, kind="stable")[:, 0]
    assert result.clean.precision_at_1 == pytest.approx(np.mean(labels[nearest] == labels))
    assert result.report.retrieval == "learned pairwise distance"


def test_missing_masks_stop_a_corrupted_evaluation_before_any_embedding(run, tiny_bench, tmp_path):
    with pytest.raises(Exception, match="saliency masks are missing"):
        _evaluate(load_trained(run, device="cpu"), tiny_bench, tmp_path, masks=tmp_path / "none")
    assert not (run / "eval" / "cache").exists()


def test_an_unknown_checkpoint_name_is_an_option_error(run):
    with pytest.raises(OptionError, match="unknown checkpoint"):
        load_trained(run, checkpoint="first")


@pytest.mark.slow
def test_the_report_file_names_the_run_and_pool(run, tiny_bench, tmp_path):
    result = _evaluate(load_trained(run, device="cpu"), tiny_bench, tmp_path)
    report = json.loads(result.files["report_json"].read_text())
    assert report["run"] == str(run) and report["method"] == "triplet" and report["bgaugment"] is False
    assert report["corrupted_sets"]["pool"].endswith(os.path.join("backgrounds", "test"))
    assert report["corrupted_sets"]["mask_maker"] is None  # the bench's exact masks: no bgbias manifest


@pytest.mark.slow
def test_the_report_records_what_made_the_masks(run, tiny_bench, tmp_path):
    masks = made_masks(tiny_bench / "masks", tmp_path / "u2netp-masks")
    result = _evaluate(load_trained(run, device="cpu"), tiny_bench, tmp_path, masks=masks)
    sets = json.loads(result.files["report_json"].read_text())["corrupted_sets"]
    assert sets["masks"] == str(masks)
    assert sets["mask_maker"] == {"model": "u2netp", "backend": "torch", "precision": "fp32",
                                  "provider": "CPUExecutionProvider"}
    assert "mask_maker: u2netp, torch fp32 on CPUExecutionProvider" in result.files["report_md"].read_text()


@pytest.mark.slow
def test_a_model_bgbias_did_not_train_is_scored_by_the_same_evaluation(run, tiny_bench, tmp_path):
    trained = load_trained(run, device="cpu")
    outside = MethodModel(trained.method, trained.device, home=tmp_path / "outside", about={"source": "mine"})
    with pytest.raises(OptionError, match="records no training dataset"):
        _evaluate(outside, tiny_bench, tmp_path, corrupted=False)
    result = _evaluate(outside, tiny_bench, tmp_path, dataset="bench", root=tiny_bench / "bench")
    reference = _evaluate(trained, tiny_bench, tmp_path)
    assert result.out_dir.parent == tmp_path / "outside" / "eval"
    assert result.clean.map_at_r == reference.clean.map_at_r
    assert [s.map_at_r for s in result.corrupted] == [s.map_at_r for s in reference.corrupted]
    assert result.report.source == "mine" and result.report.same_dataset_as_training is None


@pytest.mark.slow
def test_an_approximate_search_is_labelled_and_kept_apart(run, tiny_bench, tmp_path):
    trained = load_trained(run, device="cpu")
    with pytest.raises(OptionError, match="only serves a learned distance"):
        _evaluate(trained, tiny_bench, tmp_path, corrupted=False, shortlist=4)
    trained.method.retrieval = lambda: LearnedDistance(trained.method.pairwise_distance)
    exact = _evaluate(trained, tiny_bench, tmp_path, corrupted=False)
    approximate = _evaluate(trained, tiny_bench, tmp_path, shortlist=4)
    assert approximate.report.approximate is True and "shortlist of 4" in approximate.report.retrieval
    assert "approximate" not in exact.report.model_fields_set
    assert approximate.out_dir != exact.out_dir and approximate.out_dir.name.endswith("shortlist4-test")
    recall = approximate.report.shortlist_recall
    assert 0 < recall.recall_of_exact_top_r <= 1 and recall.queries > 0
    assert 0 < recall.corrupted_recall_of_exact_top_r <= 1
    assert "APPROXIMATE" in (approximate.out_dir / "report.md").read_text().splitlines()[0]
    assert "APPROXIMATE" not in (exact.out_dir / "report.md").read_text()
    assert "APPROXIMATE" in format_evaluation_summary(approximate.report, approximate.files).splitlines()[0]


def test_the_shipped_masks_in_their_default_folder_are_named_exact_masks(tiny_bench, tmp_path):
    from bgbias.data.registry import open_dataset
    from bgbias.measurement.request import MeasureRequest, measured_label
    from bgbias.saliency.ground_truth import default_ground_truth_dir

    dataset = open_dataset("bench", tiny_bench / "bench")
    exact = MeasureRequest(corrupted=True, masks=default_ground_truth_dir(dataset))
    assert measured_label(dataset, exact) == f"{dataset.key}-exact-masks"
    elsewhere = measured_label(dataset, MeasureRequest(corrupted=True, masks=tmp_path / "exact"))
    assert elsewhere.startswith(f"{dataset.key}-masks-exact-")


@pytest.mark.slow
def test_a_class_whose_masks_show_nothing_is_flagged_by_its_name(run, tiny_bench, tmp_path):
    from PIL import Image

    masks = Path(shutil.copytree(tiny_bench / "masks", tmp_path / "masks"))
    items = split_items(open_dataset("bench", tiny_bench / "bench"), "test")
    names = open_dataset("bench", tiny_bench / "bench").class_names()
    galaxy = [item for item in items if item.label == items[0].label]
    for item in galaxy:  # nothing found: every mask of the class black
        path = mask_path(item, masks)
        with Image.open(path) as mask:
            Image.new("L", mask.size, 0).save(path)
    result = _evaluate(load_trained(run, device="cpu"), tiny_bench, tmp_path, masks=masks)
    record = result.report.empty_masks
    assert record.images == len(galaxy) and record.ids == [item.id for item in galaxy]
    row = next(row for row in result.report.per_class if row.label == items[0].label)
    assert (row.name, row.empty_masks, row.images) == (names[items[0].label], len(galaxy), len(galaxy))
    assert all(row.name == names[row.label] for row in result.report.per_class)
    text = result.files["report_md"].read_text()
    assert f"**{len(galaxy)} of {len(items)} images have a saliency mask that shows no object**" in text
    assert f"| {names[items[0].label]} ({items[0].label}) | {len(galaxy)} | {len(galaxy)} |" in text
    assert f"warning: {len(galaxy)} of {len(items)} images have a saliency mask that shows no object" in (
        format_evaluation_summary(result.report, result.files))
