"""The study keeps what is done (a matching bench, finished runs) and plans what its preset, methods and seeds
ask for."""

from __future__ import annotations

import json

import pytest

from bgbias.bench.build import BENCH_FORMAT
from bgbias.engine.config import resolve_config
from bgbias.errors import OptionError
from bgbias.study.bench import built_bench
from bgbias.study.plan import FULL_METHODS, StudyRun, study_plan
from bgbias.study.runs import train_study_run
from tests.report.synthetic import complete


def _bench_json(root, **parameters):
    root.mkdir(parents=True, exist_ok=True)
    description = {
        "format": BENCH_FORMAT,
        "parameters": {"preset": "small", "rho": 0.9, "seed": 0, **parameters},
        "summary": {"classes": {"test": 2}, "images": {"test": 8}},
    }
    (root / "bench.json").write_text(json.dumps(description))


def test_a_bench_built_with_the_same_settings_is_kept(tmp_path):
    _bench_json(tmp_path / "bench")
    summary = built_bench(tmp_path / "bench", preset="small", rho=0.9, seed=0)
    assert summary == {"root": str(tmp_path / "bench"), "preset": "small", "seed": 0,
                       "classes": {"test": 2}, "images": {"test": 8}}


def test_other_settings_or_a_damaged_description_rebuild_the_bench(tmp_path):
    _bench_json(tmp_path / "bench", rho=0.5)
    assert built_bench(tmp_path / "bench", preset="small", rho=0.9, seed=0) is None
    assert built_bench(tmp_path / "bench", preset="small", rho=0.5, seed=1) is None
    assert built_bench(tmp_path / "none", preset="small", rho=0.9, seed=0) is None
    (tmp_path / "bench" / "bench.json").write_text("{")
    assert built_bench(tmp_path / "bench", preset="small", rho=0.5, seed=0) is None


def test_a_finished_run_is_not_trained_again(tmp_path):
    planned = StudyRun("multi_similarity", True, 1)
    run = tmp_path / "multi_similarity-bgaugment-seed1"
    run.mkdir()
    config = resolve_config("multi_similarity", "bench", options={"bgaugment.enabled": True, "seed": 1})
    (run / "config.json").write_text(json.dumps(config.as_dict()))
    (run / "run.json").write_text(json.dumps({"status": "finished"}))
    lines = []
    assert train_study_run(tmp_path, planned, tmp_path / "masks", "cpu", lines.append, "5/7") == run
    assert lines == [f"5/7 multi_similarity + BGAugment, seed 1: trained already ({run})"]


def test_presets_plan_every_method_both_ways_seed_by_seed():
    quick = study_plan("quick")
    assert [(r.method, r.bgaugment, r.seed, r.watch_test) for r in quick.runs()] == [
        ("multi_similarity", False, 0, False), ("multi_similarity", True, 0, False)]
    assert quick.masks == "ground-truth"
    full = study_plan("full")
    assert full.methods == FULL_METHODS and full.seeds == 3 and len(full.runs()) == 60
    assert full.masks == "u2netp" and full.profile and not quick.profile
    assert {r.method for r in full.runs() if r.watch_test} == {"multi_similarity"}
    assert {r.seed for r in full.runs()[:20]} == {0}  # a stopped full study has whole seeds done first
    assert {"dcml", "sam", "metricformer", "avsl", "arcface", "contrastive"} <= set(full.methods)


def test_methods_and_seeds_replace_the_presets_and_are_checked():
    plan = study_plan("full", ["dcml", "triplet", "dcml"], 2, "ground-truth")
    assert plan.methods == ("dcml", "triplet") and plan.seeds == 2 and plan.masks == "ground-truth"
    assert StudyRun("dcml", True, 1).folder_name == "dcml-bgaugment-seed1"
    # A plan of its own writes a page of its own beside the presets' (same study folder, same runs reused).
    assert study_plan("full").report_folder == study_plan("quick").report_folder == "report"
    assert plan.report_folder == "report-dcml-triplet-2seeds"
    assert study_plan("quick", masks="u2netp").report_folder == "report-multi_similarity-1seed"
    with pytest.raises(OptionError, match="unknown method"):
        study_plan("quick", ["dcmlx"])
    with pytest.raises(OptionError, match="at least one training seed"):
        study_plan("quick", None, 0)
    with pytest.raises(OptionError, match="unknown mask source"):
        study_plan("quick", masks="u2net-ish")
    with pytest.raises(OptionError, match="unknown study preset"):
        study_plan("huge")


def test_each_bench_setting_has_its_own_folder_and_study_folder(tmp_path, monkeypatch):
    from bgbias.study.bench import study_bench_root
    from bgbias.study.runs import study_folder

    monkeypatch.setenv("BGBIAS_DATA", str(tmp_path / "data"))
    assert study_bench_root("small", 0.9, 0) == tmp_path / "data" / "bench"
    assert study_bench_root("small", 0.0, 0) == tmp_path / "data" / "bench-small-rho0-seed0"
    assert study_bench_root("large", 0.9, 1) == tmp_path / "data" / "bench-large-rho0.9-seed1"
    folder = study_folder(tmp_path, "small", 0.5, 0, "u2netp")
    assert folder == tmp_path / "study" / "bench-small-rho0.5-seed0-u2netp"


def test_the_dial_runs_one_study_per_mask_source_and_rho_and_reports_them(tmp_path, monkeypatch):
    from bgbias.report import runs_table
    from bgbias.study import dial
    from bgbias.study.pipeline import StudyResult
    from bgbias.study.runs import study_folder

    calls = []

    def fake_study(*, plan, rho, runs, report=True, **_):
        assert not report  # a point's folder may hold another study's page (the full preset's at rho 0.9)
        calls.append((plan.masks, rho, plan.methods, plan.seeds))
        folder = study_folder(runs, "small", rho, 0, plan.masks)
        return StudyResult(None, [folder / run.folder_name for run in plan.runs()], {})

    def fake_collect(run_dirs):
        (path,) = run_dirs
        corrupted = 0.3 if "bgaugment" in path.name else 0.2
        return [complete({"run": str(path), "clean": {"map_at_r": 0.6},
                          "corrupted": {"mean": {"map_at_r": corrupted}},
                          "drop": {"map_at_r": {"relative": (0.6 - corrupted) / 0.6}}})], {}

    monkeypatch.setattr(dial, "run_study", fake_study)
    monkeypatch.setattr(runs_table, "collect_runs", fake_collect)
    result = dial.run_dial(method="ms", rhos=(0.0, 1.0), runs=tmp_path, log=lambda _: None)
    assert calls == [("ground-truth", 0.0, ("ms",), 1), ("ground-truth", 1.0, ("ms",), 1),
                     ("u2netp", 0.0, ("ms",), 1), ("u2netp", 1.0, ("ms",), 1)]
    assert [(p.masks, p.rho, p.bgaugment) for p in result.points][:2] == [
        ("ground-truth", 0.0, False), ("ground-truth", 0.0, True)]
    assert result.folder == tmp_path / "study" / "dial-ms-bench-small-seed0"
    assert result.report["dial_png"].is_file() and "ms + BGAugment" in result.report["dial_md"].read_text()


def _failing_pass(tmp_path, monkeypatch, failing):
    """One pass of steps 5–6 of a two-run plan where the runs named in ``failing`` raise while training."""
    from types import SimpleNamespace

    from bgbias.study import runs
    from bgbias.study.plan import StudyPlan

    def fake_train(folder, run, bench, device, log, step):
        if run.folder_name in failing:
            raise failing[run.folder_name]
        return folder / run.folder_name

    monkeypatch.setattr(runs, "train_study_run", fake_train)
    monkeypatch.setattr(runs, "measure_run", lambda *args: None)
    lines = []
    plan = StudyPlan(("multi_similarity",), 1)
    bench = SimpleNamespace(masks_dir=tmp_path / "masks")
    run_dirs, failures = runs.train_and_measure(plan, bench, tmp_path, "cpu", lines.append)
    return run_dirs, failures, lines


def test_a_failed_run_is_recorded_and_the_study_goes_on_with_the_others(tmp_path, monkeypatch):
    from bgbias.engine.training_loop import TrainingDiverged
    from bgbias.study.runs import FAILURES

    diverged = TrainingDiverged("the loss became nan at epoch 3, step 7", fix="lower the learning rates")
    run_dirs, failures, lines = _failing_pass(tmp_path, monkeypatch, {"multi_similarity-seed0": diverged})
    assert run_dirs == [tmp_path / "multi_similarity-bgaugment-seed0"]
    assert failures == {"multi_similarity-seed0": str(diverged)}
    assert any("multi_similarity, seed 0 FAILED, going on with the others" in line for line in lines)
    recorded = json.loads((tmp_path / FAILURES).read_text())
    assert recorded["multi_similarity-seed0"]["error"].startswith("the loss became nan")
    assert "TrainingDiverged" in recorded["multi_similarity-seed0"]["traceback"]

    # A bug of any kind is recorded too, by its type; a pass without failures removes the record.
    run_dirs, failures, _ = _failing_pass(tmp_path, monkeypatch,
                                             {"multi_similarity-bgaugment-seed0": MemoryError("out")})
    assert failures == {"multi_similarity-bgaugment-seed0": "MemoryError: out"}
    _failing_pass(tmp_path, monkeypatch, {})
    assert not (tmp_path / FAILURES).exists()


def test_a_pass_keeps_the_failures_of_runs_outside_its_plan(tmp_path, monkeypatch):
    from bgbias.study.runs import FAILURES

    # The dial's point at rho 0.9 runs one method in the full preset's folder: the full preset's record stays.
    other = {"triplet-seed2": {"error": "the loss became nan", "traceback": "..."},
             "multi_similarity-seed0": {"error": "old", "traceback": "..."}}
    (tmp_path / FAILURES).write_text(json.dumps(other))
    _failing_pass(tmp_path, monkeypatch, {})
    assert json.loads((tmp_path / FAILURES).read_text()) == {"triplet-seed2": other["triplet-seed2"]}


def test_the_study_command_reports_failed_runs_by_its_exit_status(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from bgbias.cli import main
    from bgbias.errors import EXIT_PARTIAL
    from bgbias.study import dial, pipeline

    (tmp_path / "dial.md").write_text("the dial")
    failures = {"u2netp masks, rho 1: multi_similarity-seed0": "the loss became nan\n  fix: lower"}
    report = {"dial_md": tmp_path / "dial.md", "dial_png": tmp_path / "dial.png"}
    dialled = dial.DialResult(tmp_path, ["a point"], report, failures)
    monkeypatch.setattr(dial, "run_dial", lambda **_: dialled)
    result = CliRunner().invoke(main, ["study", "--dial"])
    assert result.exit_code == EXIT_PARTIAL, result.output
    assert "the dial" in result.output
    assert "rho 1: multi_similarity-seed0: the loss became nan" in result.output

    failed = pipeline.StudyResult(None, [], {}, {"a-seed0": "boom"})
    monkeypatch.setattr(pipeline, "run_study", lambda **_: failed)
    result = CliRunner().invoke(main, ["study"])
    assert result.exit_code == 2 and "every run failed (1): a-seed0" in result.output
    assert "Traceback" not in result.output


def test_settings_make_a_variant_of_the_method_with_folders_of_its_own():
    plan = study_plan("full", ["avsl"], 3, settings=["loss.certainty_min=global"])
    assert plan.settings == ("loss.certainty_min=global",)
    assert [run.folder_name for run in plan.runs()[:2]] == [
        "avsl-certainty_min-global-seed0", "avsl-certainty_min-global-bgaugment-seed0"]
    assert plan.runs()[1].label == "avsl (loss.certainty_min=global) + BGAugment, seed 0"
    assert plan.report_folder == "report-avsl-certainty_min-global-3seeds"
    with pytest.raises(OptionError, match="not seed"):
        study_plan("quick", settings=["seed=3"])
    with pytest.raises(OptionError, match="does not know"):  # the setting is checked for every method
        study_plan("full", ["avsl", "dcml"], settings=["loss.certainty_min=global"])


def test_a_run_trained_with_other_settings_than_planned_is_refused_naming_its_variant_folder(tmp_path):
    """A run made before AVSL's certainty followed the authors' code reads as the global minimum and without
    the first-step clipping: a study planning today's AVSL must not report it as such."""
    old = resolve_config("avsl", "bench").as_dict()
    del old["loss"]["certainty_min"], old["optim"]["grad_clip_per_group"]
    del old["optim"]["grad_clip_first_step_only"]
    old["optim"]["grad_clip"] = None
    run = tmp_path / "avsl-seed0"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(old))
    (run / "run.json").write_text(json.dumps({"status": "finished"}))
    with pytest.raises(OptionError) as err:
        train_study_run(tmp_path, StudyRun("avsl", False, 0), tmp_path / "masks", "cpu", print, "5/7")
    assert err.value.path == str(run)
    assert 'loss.certainty_min = global (the plan: row)' in err.value.problem
    assert "optim.grad_clip = null (the plan: 10.0)" in err.value.problem
    settings = ("loss.certainty_min=global", "optim.grad_clip=null", "optim.grad_clip_first_step_only=false",
                "optim.grad_clip_per_group=false")
    variant = StudyRun("avsl", False, 0, settings=settings)
    assert f"rename it to {variant.folder_name}" in err.value.fix
    assert f"--set {' --set '.join(settings)}" in err.value.fix
    run.rename(tmp_path / variant.folder_name)  # kept as that variant, the study reuses it
    lines = []
    assert train_study_run(tmp_path, variant, tmp_path / "masks", "cpu", lines.append, "5/7") == \
        tmp_path / variant.folder_name
    assert lines[0].endswith("trained already (" + str(tmp_path / variant.folder_name) + ")")


def test_the_dial_takes_no_settings():
    from click.testing import CliRunner

    from bgbias.cli import main

    result = CliRunner().invoke(main, ["study", "--dial", "--set", "loss.alpha=3"])
    assert result.exit_code == 2 and "--set and --dial together" in result.output


def test_a_variant_s_page_names_its_settings_in_its_title(tmp_path, monkeypatch):
    from bgbias.study import pipeline

    titles = []
    monkeypatch.setattr(pipeline, "prepare_study_bench", lambda *args: None)
    monkeypatch.setattr(pipeline, "train_and_measure", lambda *args: ([tmp_path / "run"], {}))
    monkeypatch.setattr(pipeline, "report_study",
                        lambda runs, out, title, **_: titles.append((out, title)) or {})
    plan = study_plan("full", ["avsl"], 1, settings=["loss.certainty_min=global"])
    pipeline.run_study(plan=plan, runs=tmp_path, log=lambda line: None)
    out, title = titles[0]
    assert out.name == "report-avsl-certainty_min-global-1seed"
    assert title.endswith("1 runs, every run with loss.certainty_min=global")
