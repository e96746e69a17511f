"""``bgbias study --dry-run``: the plan, what is done, the cost and, for SLURM, the submission; nothing is
recorded, trained or submitted. ``--status`` reads a plan while it is worked on."""

from __future__ import annotations

import shlex

import pytest
from click.testing import CliRunner

from bgbias.cli import main
from bgbias.study import dry_run
from bgbias.study.cost import RunCost
from tests.docs_blocks import code_block


@pytest.fixture
def fake_timing(monkeypatch):
    """Every run costs 30 min of training and 6 of measurement (no configuration is timed)."""
    asked = []

    def estimate(spec, runs, **options):
        asked.append([run.folder_name for run in runs])
        return {run.folder_name: RunCost(1800.0, 360.0) for run in runs}

    monkeypatch.setattr(dry_run, "estimate_runs", estimate)
    return asked


@pytest.mark.slow
def test_the_dry_run_prints_the_plan_and_its_cost_and_records_nothing(tmp_path, monkeypatch, fake_timing):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["study", "--methods", "multi_similarity,dcml", "--seeds", "2",
                                       "--dry-run", "--devices", "cpu"])
    assert result.exit_code == 0, result.output
    assert "a new plan" in result.output and "10 steps: 10 pending" in result.output
    assert "  run/dcml-bgaugment-seed1: pending" in result.output
    lines = {line.split()[0]: line for line in result.output.splitlines() if line[:1].isalpha()}
    assert lines["dcml"].split() == ["dcml", "4", "2.00", "h", "0.40", "h", "(24.0", "min)", "2.40", "h"]
    total = lines["total"].split()
    assert total[1] == "8" and 4.80 <= float(total[2]) < 4.9  # 8 runs of 0.6 h; prepare and page add minutes
    assert fake_timing == [[f"{m}{b}-seed{s}" for s in (0, 1) for m in ("multi_similarity", "dcml")
                            for b in ("", "-bgaugment")]]
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_the_slurm_dry_run_prints_each_array_s_sbatch_lines(tmp_path, monkeypatch, fake_timing):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["study", "--dry-run", "--executor", "slurm", "--slurm-partition",
                                       "gpu", "--slurm-time", "90", "--slurm-array-parallelism", "4"])
    assert result.exit_code == 0, result.output
    submission = result.output.split("the submission (nothing was submitted):\n")[1]
    assert "#   task 0: prepare" in submission and "#SBATCH --partition=gpu" in submission
    assert "#SBATCH --array=0-1%2" in submission  # two run tasks, at most 4 at once
    assert "#SBATCH --dependency=afterany:ARRAY1_JOB_ID" in submission and "#SBATCH --time=90" in submission
    assert not (tmp_path / "runs").exists()


def test_the_status_lists_every_step_and_a_missing_plan_is_an_error(tmp_path, monkeypatch):
    from bgbias.study.ledger import update_plan, with_step
    from bgbias.study.pipeline import plan_study
    from bgbias.study.plan import study_plan
    from bgbias.study.runs import study_folder
    from bgbias.study.spec import bench_spec

    monkeypatch.chdir(tmp_path)
    missing = CliRunner().invoke(main, ["study", "--status"])
    assert missing.exit_code == 2 and "holds no study plan" in missing.output
    spec = bench_spec("small", 0.9, 0, "ground-truth")
    folder = study_folder(tmp_path / "runs", spec)
    plan_study(folder, spec, study_plan("quick"))
    update_plan(folder, lambda plan: with_step(plan, "run/multi_similarity-seed0", state="failed",
                                               error="OutputError: disk full\n  file: x"))
    result = CliRunner().invoke(main, ["study", "--status"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].endswith("3 pending, 1 failed")
    assert "| run/multi_similarity-seed0 | failed |" in result.output
    assert "- run/multi_similarity-seed0: OutputError: disk full" in result.output


KNOWN = {"cub": (11788, 200, 75, 25, 5924), "cars": (16185, 196, 74, 24, 8131),
         "sop": (120053, 22634, 8489, 2829, 60502)}
"""A published dataset's images and classes, its fixed split's train and val classes and its test images
(docs/datasets.md, docs/study.md)."""


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_a_dataset_not_downloaded_is_counted_from_its_known_size(name, tmp_path):
    from bgbias.study.sizes import split_sizes
    from bgbias.study.spec import dataset_spec

    images, _, train, val, test = KNOWN[name]
    spec = dataset_spec(name, tmp_path / "nowhere", None, None, dry_run=True)
    sizes = split_sizes(spec)
    assert sizes.images == sum(sizes.train_classes) + sizes.val + sizes.test == images
    assert (len(sizes.train_classes), sizes.test) == (train, test)
    # The other images are spread evenly over the train and val classes: at most one apart.
    assert max(sizes.train_classes) - min(sizes.train_classes) <= 1
    assert abs(sizes.val - val * (images - test) / (train + val)) < val
    assert not (tmp_path / "nowhere").exists()


DOCS_EXAMPLE = shlex.split(code_block("docs/study.md", "study-dry-run-before-download").text)
"""docs/study.md's dry run of the paper's study on CUB before it is downloaded."""


@pytest.mark.parametrize("command", [DOCS_EXAMPLE, ["bgbias", "study", "--dataset", "cars", "--dry-run"],
                                     ["bgbias", "study", "--dataset", "sop", "--dry-run"]])
def test_the_dry_run_prices_a_dataset_not_downloaded_from_its_known_size(command, tmp_path, monkeypatch):
    from bgbias.study.plan import study_plan
    from tests.study.test_cost import FAKE

    name = command[command.index("--dataset") + 1]
    preset = command[command.index("--preset") + 1] if "--preset" in command else "quick"

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BGBIAS_DATA", raising=False)
    timed, masked = [], []
    monkeypatch.setattr(dry_run, "time_config", lambda config, device, **options: timed.append(
        (config.dataset, options["images"])) or FAKE)
    monkeypatch.setattr(dry_run, "estimate_masks",
                        lambda spec, images, device, **_: masked.append(images) or 60.0)
    result = CliRunner().invoke(main, [*command[1:], "--devices", "cpu"])
    assert result.exit_code == 0, result.output
    images, classes, *_ = KNOWN[name]
    folders = {"cub": "CUB_200_2011", "cars": "cars196", "sop": "Stanford_Online_Products"}
    root = tmp_path / "data" / folders[name]
    assert f"the {name} dataset is not at {root}" in result.output
    assert f"priced from its known size: {images:,} images, {classes:,} classes" in result.output
    assert "--root DIR" in result.output
    plan = study_plan(preset, dataset=name)
    lines = {line.split()[0]: line.split() for line in result.output.splitlines() if line[:1].isalpha()}
    for method in plan.methods:
        assert lines[method][1] == str(2 * plan.seeds)
    assert lines["total"][1] == str(len(plan.runs()))
    # Stand-in pictures (no images to copy); U²-Net (u2netp by default) priced over every image.
    assert timed and all(dataset == name and not sample for dataset, sample in timed)
    assert masked == [images]
    assert list(tmp_path.iterdir()) == []  # nothing written: no plan, no dataset folder


@pytest.mark.parametrize("command", [["--dataset", "cub"], ["--dataset", "cub", "--executor", "slurm"],
                                     ["--dataset", "folder", "--root", "nowhere", "--dry-run"]])
def test_a_study_without_its_dataset_still_refuses_to_run(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BGBIAS_DATA", raising=False)
    result = CliRunner().invoke(main, ["study", *command])
    assert result.exit_code == 2
    assert "dataset is not at" in result.output and "--root DIR" in result.output
    assert list(tmp_path.iterdir()) == []


def test_a_dataset_folder_that_is_there_is_read_not_replaced_by_its_known_size(tmp_path, monkeypatch,
                                                                             fake_timing):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data" / "CUB_200_2011").mkdir(parents=True)
    result = CliRunner().invoke(main, ["study", "--dataset", "cub", "--dry-run"])
    assert result.exit_code == 2 and "images.txt" in result.output and "known size" not in result.output


@pytest.mark.slow
def test_a_run_whose_training_finished_is_costed_for_its_measurement_alone(tmp_path, monkeypatch):
    """Its step trains nothing more (the run is kept), so the rest of it costs its measurement."""
    from bgbias.study.dry_run import plan_cost
    from bgbias.study.pipeline import merged_plan
    from bgbias.study.plan import study_plan
    from bgbias.study.runs import study_folder
    from bgbias.study.spec import bench_spec
    from bgbias.study.steps import page_step_id
    from tests.report.synthetic import write_run_record
    from tests.study.test_cost import FAKE

    monkeypatch.setenv("BGBIAS_DATA", str(tmp_path / "data"))
    spec, plan = bench_spec("small", 0.9, 0, "ground-truth", backgrounds=tmp_path), study_plan("quick")
    folder = study_folder(tmp_path / "runs", spec)
    fresh = merged_plan(None, folder, spec, plan, 1, extend=False)
    trained = folder / "multi_similarity-seed0"
    trained.mkdir(parents=True)
    write_run_record(trained)
    costs = plan_cost(folder, fresh, [page_step_id(plan)], device="cpu", timer=lambda *_, **__: FAKE).costs
    assert costs["multi_similarity-seed0"].train == 0
    assert costs["multi_similarity-seed0"].measure == costs["multi_similarity-bgaugment-seed0"].measure > 0
    assert costs["multi_similarity-bgaugment-seed0"].train > 0
