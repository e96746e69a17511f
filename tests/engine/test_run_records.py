"""A run knows the dataset it trained on, says so when it stops on an error, and names an unreadable image
met in a data-loader worker instead of printing the worker's traceback."""

from __future__ import annotations

import json
import shutil

import pytest

from bgbias.data.registry import open_dataset
from bgbias.data.splits import split_items
from bgbias.engine.trained import load_trained
from bgbias.engine.training import resume_training, train
from bgbias.errors import DatasetError, ImageError
from bgbias.measurement.request import MeasureRequest
from bgbias.report.evaluate import evaluate
from tests.conftest import tiny_config
from tests.saliency.fakes import made_masks


@pytest.fixture
def run(tiny_run, tmp_path):
    copy = tmp_path / "runs" / "run"
    shutil.copytree(tiny_run, copy)
    return copy


def _bench_copy(tiny_bench, tmp_path, drop_test_image: bool):
    """A copy of the tiny bench, optionally without its first test image (another dataset, same folder)."""
    root = tmp_path / "bench-copy"
    shutil.copytree(tiny_bench / "bench", root)
    if drop_test_image:
        lines = (root / "index.csv").read_text().splitlines(keepends=True)
        first_test = next(i for i, line in enumerate(lines) if ",test," in line)
        (root / "index.csv").write_text("".join(lines[:first_test] + lines[first_test + 1:]))
    return root


def _point_run_at(run, root):
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "root": str(root)}))


def _evaluate(trained, tiny_bench, tmp_path, **options):
    return evaluate(trained, MeasureRequest(workers=0, progress=False, **options), log=lambda _: None)


def test_a_run_records_the_identity_of_its_dataset(run, tiny_bench):
    trained_on = json.loads((run / "run.json").read_text())["trained_on"]
    dataset = open_dataset("bench", tiny_bench / "bench")
    assert trained_on == {"name": "bench", "root": str(dataset.root), "identity": dataset.identity(),
                          "images": len(dataset.items())}


def test_a_run_without_masks_records_none(run):
    record = json.loads((run / "run.json").read_text())
    assert record["bgaugment"] is False and (record["masks"], record["mask_maker"]) == (None, None)


@pytest.mark.slow
def test_a_bgaugment_run_records_its_masks_folder_and_what_made_them(tiny_bench, tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    for name in ("bench", "backgrounds"):
        (base / name).symlink_to(tiny_bench / name)
    masks = made_masks(tiny_bench / "masks", base / "masks")
    config = tiny_config(base, "triplet", "bgaugment.enabled=true", "schedule.validate_untrained=false",
                         epochs=1)
    result = train(config, run_dir=tmp_path / "run", progress=False, echo=False)
    record = json.loads(result.run.record.read_text())
    assert record["masks"] == str(masks.resolve())
    assert record["mask_maker"] == {"model": "u2netp", "backend": "torch", "precision": "fp32",
                                    "provider": "CPUExecutionProvider"}


def test_evaluation_refuses_a_changed_dataset_unless_asked_for_it(run, tiny_bench, tmp_path):
    changed = _bench_copy(tiny_bench, tmp_path, drop_test_image=True)
    _point_run_at(run, changed)
    trained = load_trained(run, device="cpu")
    with pytest.raises(DatasetError, match="not the one this run was trained on") as info:
        _evaluate(trained, tiny_bench, tmp_path)
    assert info.value.path == str(run / "run.json") and "dataset=" in info.value.fix
    assert not (run / "eval").exists()
    on_purpose = _evaluate(trained, tiny_bench, tmp_path, root=changed)
    assert on_purpose.report.same_dataset_as_training is False


def test_an_identical_copy_of_the_dataset_is_the_same_dataset(run, tiny_bench, tmp_path):
    _point_run_at(run, _bench_copy(tiny_bench, tmp_path, drop_test_image=False))
    result = _evaluate(load_trained(run, device="cpu"), tiny_bench, tmp_path)
    assert result.report.same_dataset_as_training is True


def test_resuming_on_a_changed_dataset_is_refused_before_anything_is_written(run, tiny_bench, tmp_path):
    _point_run_at(run, _bench_copy(tiny_bench, tmp_path, drop_test_image=True))
    before = {path.name: path.read_bytes() for path in run.iterdir() if path.is_file()}
    with pytest.raises(DatasetError, match="changed since this run started"):
        resume_training(run, progress=False, echo=False)
    assert {path.name: path.read_bytes() for path in run.iterdir() if path.is_file()} == before


def _break_one_image(root, split):
    """Truncate the first image of ``split`` in a bench copy; returns its path."""
    item = split_items(open_dataset("bench", root), split)[0]
    item.image.write_bytes(item.image.read_bytes()[:40])
    return item.image


def test_an_unreadable_image_in_a_worker_names_the_file_and_marks_the_run_failed(tiny_bench, tmp_path):
    base = tmp_path / "base"
    shutil.copytree(tiny_bench, base, symlinks=True)
    broken = _break_one_image(base / "bench", "train")
    config = tiny_config(base, "triplet", "data.workers=1", "schedule.validate_untrained=false", epochs=1)
    with pytest.raises(ImageError) as info:
        train(config, run_dir=tmp_path / "run", progress=False, echo=False)
    assert info.value.path == str(broken)
    assert "Traceback" not in info.value.render() and "bgbias masks" in info.value.fix
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["status"] == "failed" and str(broken) in record["error"]


def test_an_unreadable_image_met_by_evaluation_workers_names_the_file(run, tiny_bench, tmp_path):
    root = _bench_copy(tiny_bench, tmp_path, drop_test_image=False)
    broken = _break_one_image(root, "test")
    trained = load_trained(run, device="cpu")
    with pytest.raises(ImageError) as info:
        evaluate(trained, MeasureRequest(root=root, workers=1, progress=False), log=lambda _: None)
    assert info.value.path == str(broken) and "Traceback" not in info.value.render()
