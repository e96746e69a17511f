"""The study keeps what is done (a matching bench, finished runs) and plans what its preset, methods and seeds
ask for; a failed run is recorded in the plan and the study goes on with the others."""

from __future__ import annotations

import json

import pytest

from bgbias.bench.build import BENCH_FORMAT
from bgbias.errors import OptionError
from bgbias.study.bench import built_bench
from bgbias.study.local import Slot
from bgbias.study.plan import FULL_METHODS, StudyRun, study_plan
from bgbias.study.runs import run_config, train_study_run
from bgbias.study.spec import bench_spec
from tests.report.synthetic import complete, write_run_record

CPU = [Slot("cpu")]
"""One worker in this process: the stand-ins the tests put in place of training stay in effect."""


def _spec(tmp_path, masks="ground-truth"):
    return bench_spec("small", 0.9, 0, masks, backgrounds=tmp_path / "pools")


def _bench_json(root, **parameters):
    root.mkdir(parents=True, exist_ok=True)
    description = {
        "format": BENCH_FORMAT, "version": 1,
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
    spec = _spec(tmp_path)
    run = tmp_path / "multi_similarity-bgaugment-seed1"
    run.mkdir()
    config = run_config(spec, planned).as_dict()
    # Trained on another machine, from inputs elsewhere: how a run is computed and where its inputs lay do
    # not make it another run.
    config.update(device="cuda", amp="bf16", root=str(tmp_path / "elsewhere" / "bench"))
    config["data"]["workers"] = 4
    config["bgaugment"]["masks"] = str(tmp_path / "elsewhere" / "masks")
    (run / "config.json").write_text(json.dumps(config))
    write_run_record(run)
    lines = []
    assert train_study_run(tmp_path, planned, spec, "cpu", lines.append) == run
    assert lines == [f"multi_similarity + BGAugment, seed 1: trained already ({run})"]


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
    from bgbias.study.runs import study_folder
    from bgbias.study.spec import study_bench_root

    monkeypatch.setenv("BGBIAS_DATA", str(tmp_path / "data"))
    assert study_bench_root("small", 0.9, 0) == tmp_path / "data" / "bench"
    assert study_bench_root("small", 0.0, 0) == tmp_path / "data" / "bench-small-rho0-seed0"
    assert study_bench_root("large", 0.9, 1) == tmp_path / "data" / "bench-large-rho0.9-seed1"
    folder = study_folder(tmp_path, bench_spec("small", 0.5, 0, "u2netp"))
    assert folder == tmp_path / "study" / "bench-small-rho0.5-seed0-u2netp"
    assert study_folder(tmp_path, bench_spec("small", 0.5, 0, "ground-truth")) != folder


@pytest.mark.slow
def test_the_dial_runs_one_study_per_mask_source_and_rho_and_reports_them(tmp_path, monkeypatch):
    from bgbias.study import dial
    from bgbias.study.pipeline import StudyResult
    from bgbias.study.runs import study_folder

    calls = []

    def fake_study(folder, spec, plan, *, slots, extend, **_):
        # A point is added to the plan of its bench's study folder, which may hold another study (the full
        # preset's runs at rho 0.9): without --extend that plan would refuse the point's runs.
        assert extend and slots == CPU
        assert folder == study_folder(tmp_path, spec) and spec.masks == plan.masks
        # Its page has a folder of its own: it never replaces the page of the study it shares a folder with.
        assert plan.report_folder == "report-ms-1seed"
        calls.append((plan.masks, spec.bench.rho, plan.methods, plan.seeds))
        return StudyResult(folder, [folder / run.folder_name for run in plan.runs()], {})

    def fake_collect(run_dirs):
        (path,) = run_dirs
        corrupted = 0.3 if "bgaugment" in path.name else 0.2
        return [complete({"run": str(path), "clean": {"map_at_r": 0.6},
                          "corrupted": {"mean": {"map_at_r": corrupted}},
                          "drop": {"map_at_r": {"relative": (0.6 - corrupted) / 0.6}}})], {}

    monkeypatch.setattr(dial, "run_study", fake_study)
    monkeypatch.setattr(dial, "collect_runs", fake_collect)
    result = dial.run_dial(method="ms", rhos=(0.0, 1.0), runs=tmp_path, slots=CPU, log=lambda _: None)
    assert calls == [("ground-truth", 0.0, ("ms",), 1), ("ground-truth", 1.0, ("ms",), 1),
                     ("u2netp", 0.0, ("ms",), 1), ("u2netp", 1.0, ("ms",), 1)]
    assert [(p.masks, p.rho, p.bgaugment) for p in result.points][:2] == [
        ("ground-truth", 0.0, False), ("ground-truth", 0.0, True)]
    assert result.folder == tmp_path / "study" / "dial-ms-bench-small-seed0"
    assert result.report["dial_png"].is_file() and "ms + BGAugment" in result.report["dial_md"].read_text()


def _failing_pass(tmp_path, monkeypatch, failing, methods=("multi_similarity",), extend=False):
    """One ``run_study`` of ``methods`` (one seed) in ``tmp_path/study``, the bench's preparation and every
    run's training, measurement and page replaced by stand-ins; the runs named in ``failing`` raise while
    training. Returns the result, the log and the pages written (the keyword arguments of each)."""
    from bgbias.study import steps
    from bgbias.study.pipeline import run_study
    from bgbias.study.plan import StudyPlan

    def fake_train(folder, run, spec, device, log, *, processes=1):
        if run.folder_name in failing:
            raise failing[run.folder_name]
        return folder / run.folder_name

    pages = []
    monkeypatch.setattr(steps, "prepare", lambda spec, log: {})
    monkeypatch.setattr(steps, "train_study_run", fake_train)
    monkeypatch.setattr(steps, "measure_run", lambda *args: None)
    monkeypatch.setattr(steps, "report_study", lambda runs, out, **options: pages.append(options) or {})
    lines = []
    result = run_study(tmp_path / "study", _spec(tmp_path), StudyPlan(tuple(methods), 1), slots=CPU,
                       extend=extend, log=lines.append)
    return result, lines, pages


def test_a_failed_run_is_recorded_and_the_study_goes_on_with_the_others(tmp_path, monkeypatch):
    from bgbias.engine.loss_watch import TrainingDiverged
    from bgbias.study.ledger import read_plan

    folder = tmp_path / "study"
    diverged = TrainingDiverged("the loss became nan at epoch 3, step 7", fix="lower the learning rates")
    result, lines, pages = _failing_pass(tmp_path, monkeypatch, {"multi_similarity-seed0": diverged})
    assert result.runs == [folder / "multi_similarity-bgaugment-seed0"]
    assert result.failures == {"multi_similarity-seed0": str(diverged)}
    assert [page["failures"] for page in pages] == [result.failures]  # it leaves the failed run out, named
    assert any(line.startswith("[run/multi_similarity-seed0] FAILED, going on with the others")
               for line in lines)
    recorded = read_plan(folder).steps["run/multi_similarity-seed0"]
    assert recorded.state == "failed" and recorded.error.startswith("the loss became nan")
    assert "TrainingDiverged" in recorded.traceback

    # The next pass tries it again; a bug of any kind is recorded too, by its type.
    result, _, _ = _failing_pass(tmp_path, monkeypatch, {"multi_similarity-seed0": MemoryError("out")})
    assert result.failures == {"multi_similarity-seed0": "MemoryError: out"}
    assert "MemoryError" in read_plan(folder).steps["run/multi_similarity-seed0"].traceback
    # A pass without failures leaves no error in the plan.
    result, _, _ = _failing_pass(tmp_path, monkeypatch, {})
    assert result.failures == {} and len(result.runs) == 2
    assert all(step.state == "done" and step.error is None and step.traceback is None
               for step in read_plan(folder).steps.values())


def test_a_run_that_failed_then_succeeds_is_on_the_page_written_again(tmp_path, monkeypatch):
    _failing_pass(tmp_path, monkeypatch, {"multi_similarity-seed0": RuntimeError("the loss became nan")})
    result, _, pages = _failing_pass(tmp_path, monkeypatch, {})
    assert result.failures == {} and len(result.runs) == 2
    assert [page["failures"] for page in pages] == [{}]  # the page again, with both runs and no failure


def test_a_pass_keeps_the_failures_of_runs_outside_its_plan(tmp_path, monkeypatch):
    from bgbias.study.ledger import read_plan

    # A study of two methods, one of which failed; then a study of the other alone in the same folder (as the
    # dial's point at rho 0.9 runs one method in the full preset's folder): the first study's record stays.
    failed = {"triplet-seed0": RuntimeError("the loss became nan")}
    _failing_pass(tmp_path, monkeypatch, failed, methods=("multi_similarity", "triplet"))
    result, _, _ = _failing_pass(tmp_path, monkeypatch, {}, methods=("multi_similarity",), extend=True)
    assert result.failures == {} and len(result.runs) == 2
    kept = read_plan(tmp_path / "study").steps["run/triplet-seed0"]
    assert kept.state == "failed" and kept.error == "RuntimeError: the loss became nan"


def test_the_page_of_a_subset_of_the_planned_runs_needs_no_extension(tmp_path, monkeypatch):
    _failing_pass(tmp_path, monkeypatch, {}, methods=("multi_similarity", "triplet"))
    result, _, pages = _failing_pass(tmp_path, monkeypatch, {}, methods=("triplet",))
    assert [path.name for path in result.runs] == ["triplet-seed0", "triplet-bgaugment-seed0"]
    assert [page["failures"] for page in pages] == [{}]


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

    failed = pipeline.StudyResult(tmp_path, [], {}, {"a-seed0": "boom"})
    monkeypatch.setattr(pipeline, "run_study", lambda *_, **__: failed)
    result = CliRunner().invoke(main, ["study", "--devices", "cpu"])
    assert result.exit_code == 2 and "every run failed (1): a-seed0" in result.output
    assert "Traceback" not in result.output

    page = {name: tmp_path / f"{name}.txt" for name in pipeline.PAGE_FILES}
    for name, path in page.items():
        path.write_text(f"the {name}")
    partial = pipeline.StudyResult(tmp_path, [tmp_path / "a-bgaugment-seed0"], page,
                                   {"a-seed0": "the loss became nan\n  fix: lower"})
    monkeypatch.setattr(pipeline, "run_study", lambda *_, **__: partial)
    result = CliRunner().invoke(main, ["study", "--devices", "cpu"])
    assert result.exit_code == EXIT_PARTIAL, result.output
    assert "the table_md" in result.output and "the seeds_md" in result.output
    assert "a-seed0: the loss became nan" in result.output and "fix: lower" not in result.output


def test_the_study_command_names_the_page_s_error_when_only_the_page_failed(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from bgbias.cli import main
    from bgbias.study import steps

    def full_disk(*args, **options):
        raise OSError(28, "No space left on device")

    monkeypatch.setenv("BGBIAS_DATA", str(tmp_path / "data"))
    monkeypatch.setattr(steps, "prepare", lambda spec, log: {})
    monkeypatch.setattr(steps, "train_study_run",
                        lambda folder, run, *args, **options: folder / run.folder_name)
    monkeypatch.setattr(steps, "measure_run", lambda *args: None)
    monkeypatch.setattr(steps, "report_study", full_disk)
    result = CliRunner().invoke(main, ["study", "--devices", "cpu", "--out", str(tmp_path / "study")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    error = result.output[result.output.index("error:"):]  # after the log, which names it as it happens
    assert "No space left on device" in error and "every run failed" not in error


def test_settings_make_a_variant_of_the_method_with_folders_of_its_own():
    plan = study_plan("full", ["avsl"], 3, settings=["loss.certainty_min=global"])
    assert plan.settings == ("loss.certainty_min=global",)
    assert [run.folder_name for run in plan.runs()[:2]] == [
        "avsl-certainty_min-global-seed0", "avsl-certainty_min-global-bgaugment-seed0"]
    assert plan.runs()[1].label == "avsl (loss.certainty_min=global) + BGAugment, seed 0"
    assert plan.report_folder == "report-avsl-certainty_min-global-3seeds"
    for key in ("seed", "root", "bgaugment.enabled", "bgaugment.masks", "schedule.watch_test", "method"):
        with pytest.raises(OptionError, match=f"the study sets {key} for each run itself"):
            study_plan("quick", settings=[f"{key}=1"])
    # Any other setting makes a variant, as `bgbias train --set` does (a trial with fewer epochs, another
    # backbone).
    trial = study_plan("quick", settings=["schedule.epochs=2", "model.backbone=resnet50"])
    assert trial.runs()[0].folder_name == "multi_similarity-schedule.epochs-2-model.backbone-resnet50-seed0"
    with pytest.raises(OptionError, match="does not know"):  # the setting is checked for every method
        study_plan("full", ["avsl", "dcml"], settings=["loss.certainty_min=global"])


def test_a_run_trained_with_other_settings_than_planned_is_refused_naming_its_variant_folder(tmp_path):
    """A run trained with the global certainty minimum and without the first-step clipping: a study planning
    today's AVSL must not report it as such."""
    spec = _spec(tmp_path)
    old = run_config(spec, StudyRun("avsl", False, 0)).as_dict()
    old["loss"]["certainty_min"] = "global"
    old["optim"].update(grad_clip_per_group=False, grad_clip_first_step_only=False, grad_clip=None)
    run = tmp_path / "avsl-seed0"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(old))
    write_run_record(run)
    with pytest.raises(OptionError) as err:
        train_study_run(tmp_path, StudyRun("avsl", False, 0), spec, "cpu", print)
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
    assert train_study_run(tmp_path, variant, spec, "cpu", lines.append) == tmp_path / variant.folder_name
    assert lines[0].endswith("trained already (" + str(tmp_path / variant.folder_name) + ")")


def test_the_dial_takes_no_settings():
    from click.testing import CliRunner

    from bgbias.cli import main

    result = CliRunner().invoke(main, ["study", "--dial", "--set", "loss.alpha=3"])
    assert result.exit_code == 2 and "--set and --dial together" in result.output


def test_a_variant_s_page_names_its_settings_in_its_title(tmp_path, monkeypatch):
    from bgbias.study import steps
    from bgbias.study.pipeline import run_study

    titles = []
    monkeypatch.setattr(steps, "prepare", lambda spec, log: {})
    monkeypatch.setattr(steps, "make_mask_shard", lambda *args: {})
    monkeypatch.setattr(steps, "train_study_run",
                        lambda folder, run, *args, **options: folder / run.folder_name)
    monkeypatch.setattr(steps, "measure_run", lambda *args: None)
    monkeypatch.setattr(steps, "report_study",
                        lambda runs, out, title, **_: titles.append((out, title)) or {})
    plan = study_plan("full", ["avsl"], 1, settings=["loss.certainty_min=global"])
    run_study(tmp_path / "study", _spec(tmp_path, "u2netp"), plan, slots=CPU, log=lambda line: None)
    ((out, title),) = titles
    assert out == tmp_path / "study" / "report-avsl-certainty_min-global-1seed"
    assert title == ("bgbias study: bench small, rho 0.9, bench seed 0, u2netp masks, 2 runs, every run "
                     "with loss.certainty_min=global")



def test_the_page_of_one_finished_run_says_one_run(tmp_path, monkeypatch):
    failing = {"multi_similarity-bgaugment-seed0": RuntimeError("the loss became nan")}
    _, _, pages = _failing_pass(tmp_path, monkeypatch, failing)
    assert [page["title"] for page in pages] == [
        "bgbias study: bench small, rho 0.9, bench seed 0, ground-truth masks, 1 run"]


TINY_RUN = ("model.backbone=tiny_cnn", "model.pretrained=false", "model.embedding_dim=16",
            "data.batch_size=8", "data.m_per_class=2", "data.crop=32", "data.workers=0", "schedule.epochs=1",
            "data.batches_per_epoch=1", "schedule.validate_untrained=false")
"""A run's settings for the tiny bench (tests/conftest.py): a random-weight backbone on 32-px crops, one batch
and one validation: the check is of the study launching torchrun, not of training under it
(tests/engine/test_distributed.py trains the methods under torchrun)."""


@pytest.mark.slow
def test_a_run_of_several_processes_trains_under_torchrun(tiny_bench, tmp_path):
    """--gpus-per-run k: the run trains under torchrun in k processes (here on the CPU, gloo)."""
    from bgbias.study.spec import StudySpec

    spec = StudySpec(dataset="bench", root=str(tiny_bench / "bench"), masks="folder",
                     masks_dir=str(tiny_bench / "masks"), backgrounds=str(tiny_bench / "backgrounds"))
    run = StudyRun("triplet", False, 0, settings=TINY_RUN)
    run_dir = train_study_run(tmp_path / "study", run, spec, "cpu", lambda _: None, processes=2)
    assert run_dir == tmp_path / "study" / run.folder_name
    assert json.loads((run_dir / "run.json").read_text())["status"] == "finished"
    assert sorted(path.name for path in (run_dir / "checkpoints").iterdir()) == ["best.pt", "last.pt"]


def test_the_dial_honours_explain_images(monkeypatch):
    from bgbias.study import dial, pipeline

    planned = []

    def run_study(folder, spec, plan, **options):
        planned.append(plan)
        return pipeline.StudyResult(folder, [], {})

    monkeypatch.setattr(dial, "run_study", run_study)
    dial.run_dial(rhos=(0.9,), masks=("ground-truth",), explain_images=3, log=lambda _: None)
    assert [plan.explain_images for plan in planned] == [3]
