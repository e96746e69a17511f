"""What bgbias reads back is checked, not trusted: a report.json, an explanation's summary, a model's
model.json, a run's run.json and metrics with a field of another type give an error naming the file, the
field and the fix (exit 2 from the command line), never a traceback or a silently wrong table; a ledger line
of another type is redone; a damaged record that only says when something happened is left out."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from bgbias.cli import main
from bgbias.errors import RecordError
from tests.report.synthetic import make_report


@pytest.fixture
def run_with_report(tiny_run, tmp_path):
    """A copy of the tiny run with an evaluation report of synthetic scores (and a per-class table)."""
    run = tmp_path / "runs" / "run"
    shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns("eval", "explain"))
    report = make_report("triplet", False, "bench", run=str(run), seed=0)
    (run / "eval" / "bench-test").mkdir(parents=True)
    (run / "eval" / "bench-test" / "report.json").write_text(json.dumps(report))
    return run


def _tamper(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(("change", "field", "found"), [
    (lambda r: r["clean"].update(map_at_r="0.99"), "clean.map_at_r", '"0.99"'),
    (lambda r: r.update(corrupted="oops"), "corrupted", '"oops"'),
    (lambda r: r["per_class"][0].update(drop=[1]), "per_class[0].drop", "[1]"),
    (lambda r: r.update(bgaugment="yes"), "bgaugment", '"yes"'),
    (lambda r: r.update(seed="0"), "seed", '"0"'),
])
def test_a_report_json_with_a_wrong_type_names_the_field(run_with_report, tmp_path, change, field, found):
    path = run_with_report / "eval" / "bench-test" / "report.json"
    _tamper(path, change)
    for study in ([], ["--study"]):
        result = CliRunner().invoke(main, ["report", *study, "--out", str(tmp_path / "out"),
                                           str(run_with_report)])
        assert result.exit_code == 2, result.output
        assert f"field {field} must be" in result.output and f"got {found}" in result.output
        assert str(path) in result.output and "bgbias eval" in result.output
    assert not (tmp_path / "out").exists()


def test_an_explanation_summary_with_a_wrong_type_names_the_file(run_with_report, tmp_path):
    folder = run_with_report / "explain" / "bench-test-smoothgrad"
    folder.mkdir(parents=True)
    summary = {"format": "bgbias-explain-summary", "version": 1, "dataset": "bench",
               "attribution": "smoothgrad", "geometry": {"resize": 128, "crop": 128}, "images": 3,
               "scored": 3, "mean": "0.5", "std": None}
    (folder / "summary.json").write_text(json.dumps(summary))
    result = CliRunner().invoke(main, ["report", "--out", str(tmp_path / "out"), str(run_with_report)])
    assert result.exit_code == 2, result.output
    assert "the explanation's summary: field mean must be a finite number or null" in result.output
    assert "summary.json" in result.output and "bgbias explain" in result.output


def test_a_model_json_without_its_spec_names_the_file(tmp_path):
    home = tmp_path / "mine"
    (home / "eval" / "bench-test").mkdir(parents=True)
    (home / "model.json").write_text(json.dumps({"format": "bgbias-external-model", "version": 1,
                                                 "label": "mine", "fingerprint": "f", "kind": "onnx"}))
    (home / "eval" / "bench-test" / "report.json").write_text(json.dumps(make_report("mine", None, "bench")))
    result = CliRunner().invoke(main, ["report", "--out", str(tmp_path / "out"), str(home)])
    assert result.exit_code == 2, result.output
    assert "the external model's record: field spec must be a string" in result.output
    assert "model.json" in result.output and "Traceback" not in result.output


def _watched(folder, record, rows):
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "run.json").write_text(json.dumps(record))
    return folder


WATCHED_ROWS = [{"epoch": e, "test_map_at_r": 0.5, "test_corrupted_map_at_r": 0.2} for e in range(3)]


@pytest.mark.parametrize(("record", "rows", "message"), [
    ({"status": "finished", "best_epoch": "1", "monitor": "val_map_at_r"}, WATCHED_ROWS, "run's record"),
    ({"status": "finished", "monitor": "val_map_at_r"}, WATCHED_ROWS, "run's record"),
    ({"status": "finished", "best_epoch": 1, "monitor": "val_map_at_r"},
     [*WATCHED_ROWS[:2], {**WATCHED_ROWS[2], "epoch": "2"}], "line 3 of the run's metrics: field epoch"),
    ({"status": "finished", "best_epoch": 1, "monitor": "val_map_at_r"},
     [*WATCHED_ROWS[:2], {**WATCHED_ROWS[2], "test_map_at_r": "0.5"}], "epoch 2 have no number"),
])
def test_model_selection_never_skips_a_run_whose_records_are_damaged(tmp_path, record, rows, message):
    from bgbias.report.study_report import selections

    run = _watched(tmp_path / "run", record, rows)
    with pytest.raises(RecordError, match=message) as raised:
        selections([run])
    assert "bgbias train --resume" in raised.value.fix


def test_a_run_json_of_another_shape_reads_as_damaged(tmp_path):
    from bgbias.engine.run_dir import RunDir, read_record, read_trained_on

    run = _watched(tmp_path / "run", {"status": "finished", "best_epoch": 2, "monitor": "val_map_at_r",
                                      "trained_on": {"name": "bench", "identity": 5}}, WATCHED_ROWS)
    assert read_record(RunDir(run)) is None and read_trained_on(RunDir(run)) is None


def test_ledger_lines_of_another_type_are_redone_not_coerced():
    from bgbias.attribution.records import ImageScore
    from bgbias.saliency.records import MaskRecord

    line = {"id": "a/b.jpg", "label": 3, "mask_source": "saliency", "foreground_fraction": 0.25,
            "attribution_on_foreground": 0.5, "score": 0.33}
    assert ImageScore.from_json(line).score == 0.33
    for change in ({"score": "0.33"}, {"label": "3"}, {"mask_source": "elsewhere"}, {"reference": "x"}):
        assert ImageScore.from_json({**line, **change}) is None, change
    mask = {"id": "a/b.jpg", "status": "ok", "size": [32, 24], "image_sha256": "ab" * 32}
    assert MaskRecord.from_json(mask).size == (32, 24)
    for change in ({"size": ["32", 24]}, {"size": [32]}, {"raw_max": "9"}, {"quality": {"iou": "0.5"}},
                   {"image_sha256": None}):
        assert MaskRecord.from_json({**mask, **change}) is None, change


def test_a_mask_manifest_of_another_shape_names_the_file(tmp_path):
    from bgbias.saliency.records import MANIFEST_NAME, check_settings

    manifest = {"format": "bgbias-masks", "version": 1, "settings": [1, 2]}
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(RecordError, match="the mask manifest: field settings must be an object"):
        check_settings(tmp_path, {"model": "u2netp"})


def test_a_study_plan_of_another_shape_names_the_file_from_the_command_line(tmp_path):
    from bgbias.study.pipeline import plan_study
    from bgbias.study.plan import study_plan
    from bgbias.study.spec import bench_spec

    folder = tmp_path / "study"
    folder.mkdir()
    plan_study(folder, bench_spec("small", 0.9, 0, "ground-truth", tmp_path / "pools"), study_plan("quick"))
    data = json.loads((folder / "plan.json").read_text())
    data["steps"]["prepare"]["attempts"] = "two"
    (folder / "plan.json").write_text(json.dumps(data))
    result = CliRunner().invoke(main, ["study", "--status", "--out", str(folder)])
    assert result.exit_code == 2, result.output
    assert str(folder / "plan.json") in result.output and "steps.prepare.attempts" in result.output
    assert "remove it and run the same `bgbias study` command again" in result.output
    assert "Traceback" not in result.output


def test_an_asset_record_of_another_shape_is_left_out_of_the_status(tmp_path):
    from bgbias.assets.store import record_path, status
    from tests.assets.fakes import build_registry

    registry = build_registry(tmp_path / "registry")
    path = record_path("model", tmp_path / "home")
    path.parent.mkdir(parents=True)
    path.write_text("[1]")
    (model,) = [row for row in status(tmp_path / "home", catalog=registry.catalog) if row.name == "model"]
    assert model.installed_at is None
