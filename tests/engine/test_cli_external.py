"""`bgbias eval --model` and `bgbias explain --model` from the command line, and `bgbias report` tables that
mix trained runs with external models."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from click.testing import CliRunner

from bgbias.cli import main
from bgbias.engine.model_folders import evaluated_folders, open_model_folder
from tests.engine.external import export_onnx, export_torchscript, exported_run


def _data_args(bench):
    return ["--dataset", "bench", "--root", str(bench / "bench"), "--masks", str(bench / "masks"),
            "--device", "cpu", "--no-progress"]


def _eval_args(bench, tmp_path):
    return ["eval", *_data_args(bench), "--workers", "0", "--corrupted", "--repeats", "2", "--backgrounds",
            str(bench / "backgrounds"), "--manifests", str(tmp_path / "manifests")]


@pytest.mark.slow
def test_a_torchscript_model_and_a_run_share_one_report_table(tiny_run, tiny_bench, tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(tiny_run, runs / "run")
    scored = CliRunner().invoke(main, [*_eval_args(tiny_bench, tmp_path), "--checkpoint", str(runs / "run")])
    assert scored.exit_code == 0, scored.output
    model = export_torchscript(tiny_run, tmp_path / "run.pt")
    home = runs / "external" / "mine"
    result = CliRunner().invoke(main, [*_eval_args(tiny_bench, tmp_path), "--model", str(model),
                                       "--normalize", "none", "--no-l2-normalize", "--out", str(home)])
    assert result.exit_code == 0, result.output
    assert f"model: torchscript {model.resolve()}; reports in {home}" in result.output
    assert "normalised by none" in result.output and "as it is (no L2 normalisation)" in result.output
    assert "run.pt (" in result.output and "corrupted (2 repeats)" in result.output
    assert evaluated_folders(runs, "test") == [home, runs / "run"]
    label = open_model_folder(home).method
    table = CliRunner().invoke(main, ["report", "--runs", str(runs)])
    assert table.exit_code == 0, table.output
    rows = [line for line in table.output.splitlines() if line.startswith("| ")]
    assert [row.split(" | ")[0] for row in rows[1:]] == [f"| {label}", "| triplet", "| triplet + BGAugment"]
    # The export scores as its run: the same clean and corrupted cells.
    assert rows[1].split(" | ")[1:] == rows[2].split(" | ")[1:]


def test_model_options_need_model_and_exclude_a_run(tiny_run, tiny_bench, tmp_path):
    without = CliRunner().invoke(main, ["eval", "--input-size", "64", "--normalize", "clip"])
    assert without.exit_code == 2
    assert "--input-size, --normalize describe a model given with --model" in without.output
    both = CliRunner().invoke(main, ["eval", "--model", "tests.engine.external:tiny_embedder",
                                     "--checkpoint", str(tiny_run)])
    assert both.exit_code == 2 and "either --model or --checkpoint" in both.output
    bad = CliRunner().invoke(main, ["eval", "--model", "tests.engine.external:tiny_embedder",
                                    "--normalize", "0.5,x", "--out", str(tmp_path / "out")])
    assert bad.exit_code == 2 and "--normalize '0.5,x'" in bad.output
    no_dataset = CliRunner().invoke(main, ["eval", "--model", "tests.engine.external:tiny_embedder",
                                           "--model-arg", "dim=4", "--out", str(tmp_path / "out")])
    assert no_dataset.exit_code == 2 and "name the dataset (--dataset" in no_dataset.output


def test_a_pickled_model_is_refused_with_the_recipe(tmp_path):
    import torch

    from tests.engine.external import tiny_embedder

    torch.save(tiny_embedder(), tmp_path / "model.pt")
    result = CliRunner().invoke(main, ["eval", "--model", str(tmp_path / "model.pt"), "--dataset", "bench"])
    assert result.exit_code == 2
    assert "unpickling it can run any code" in result.output and "torch.jit.save" in result.output


def test_explain_takes_a_factory_and_refuses_an_onnx_file(tiny_run, tiny_bench, tmp_path):
    explained = CliRunner().invoke(main, ["explain", "--model", "tests.engine.external:tiny_embedder",
                                          "--out", str(tmp_path / "factory"), "--limit", "2",
                                          "--gallery", "1", *_data_args(tiny_bench)])
    assert explained.exit_code == 0, explained.output
    assert "scores:" in explained.output and str(tmp_path / "factory" / "explain") in explained.output
    onnx = export_onnx(exported_run(tiny_run), tmp_path / "run.onnx")
    refused = CliRunner().invoke(main, ["explain", "--model", str(onnx), "--out", str(tmp_path / "onnx"),
                                        "--limit", "2", *_data_args(tiny_bench)])
    assert refused.exit_code == 2 and "differentiates the model" in refused.output


@pytest.mark.slow
def test_an_exported_model_has_its_runs_profile(tiny_run, tiny_bench, tmp_path):
    """The profile is measured for any model: a TorchScript export of a run gets the run's profile."""
    runs = tmp_path / "runs"
    shutil.copytree(tiny_run, runs / "run")
    args = [arg for arg in _eval_args(tiny_bench, tmp_path) if arg != "--corrupted"]
    # Both in float32, so they agree to 1e-6 on any CPU; both are channels-last already (the run's
    # model.memory_format, a TorchScript model's default), so they add up in the same order.
    args += ["--profile", "--worst-k", "3", "--amp", "off"]
    scored = CliRunner().invoke(main, [*args, "--checkpoint", str(runs / "run")])
    assert scored.exit_code == 0, scored.output
    home = runs / "external" / "mine"
    model = export_torchscript(tiny_run, tmp_path / "run.pt")
    result = CliRunner().invoke(main, [*args, "--model", str(model), "--normalize", "none",
                                       "--no-l2-normalize", "--out", str(home)])
    assert result.exit_code == 0, result.output
    assert "profile set" in result.output

    def profile(folder):
        (report,) = folder.glob("eval/*-test/report.json")
        return {row["set"]: row["mean"] for row in json.loads(report.read_text())["profile"]["sets"]}

    ours, theirs = profile(runs / "run"), profile(home)
    assert ours.keys() == theirs.keys() and "bg-gap" in ours
    for name, means in ours.items():
        for metric, value in means.items():
            assert abs(value - theirs[name][metric]) < 1e-6, (name, metric)


@pytest.mark.parametrize(("mistake", "message"), [
    (None, r"wrong_input_size failed on a batch of shape \(4, 3, 16, 16\) \(RuntimeError: mat1 and mat2 "
           r"shapes cannot be multiplied"),
    ("raises", r"misbehaving failed on a batch of shape \(4, 3, 16, 16\) \(ValueError: this model is "
               r"broken\)"),
    ("width changes", r"gave 5-dimensional embeddings for a batch of shape \(4, 3, 16, 16\), after "
                      r"8-dimensional ones"),
    ("complex", r"embeddings of dtype complex64 for a batch of shape \(4, 3, 16, 16\)"),
    ("integer", r"embeddings of dtype int64"),
    ("zero width", r"embeddings of width 0 for a batch of shape \(4, 3, 16, 16\)"),
    ("one axis", r"output of shape \(4,\) for 4 images"),
])
def test_a_misbehaving_model_is_a_clear_error_and_leaves_no_folder(mistake, message, tiny_bench, tmp_path):
    """Exit 2 naming the model, what was wrong and its input; no report, and no home holding only model.json
    (claimed with the first result)."""
    home = tmp_path / "runs" / "external" / "broken"
    spec = ["--model", "tests.engine.external:wrong_input_size"] if mistake is None else [
        "--model", "tests.engine.external:misbehaving", "--model-arg", f"mistake={mistake}"]
    # In float32 on every machine: torch has no complex bfloat16, so under bf16 autocast the complex model
    # would fail in its forward before its output is read.
    result = CliRunner().invoke(main, [*_eval_args(tiny_bench, tmp_path), *spec, "--input-size", "16",
                                       "--batch-size", "4", "--out", str(home), "--amp", "off"])
    assert result.exit_code == 2, result.output
    assert re.search(message, result.output) and "Traceback" not in result.output
    assert not home.exists()


def test_explain_refuses_a_model_that_raises_or_blocks_gradients_and_leaves_no_folder(tiny_bench, tmp_path):
    for mistake, message in [("raises", "this model is broken"), ("detached", "carry no gradient")]:
        home = tmp_path / mistake
        result = CliRunner().invoke(main, ["explain", "--model", "tests.engine.external:misbehaving",
                                           "--model-arg", f"mistake={mistake}", "--input-size", "16",
                                           "--out", str(home), "--limit", "2", *_data_args(tiny_bench)])
        assert result.exit_code == 2 and message in result.output, result.output
        assert not home.exists()


@pytest.mark.slow
def test_a_working_model_claims_its_home_with_its_first_result(tiny_bench, tmp_path):
    home = tmp_path / "home"
    result = CliRunner().invoke(main, [*_eval_args(tiny_bench, tmp_path), "--model",
                                       "tests.engine.external:tiny_embedder", "--input-size", "16",
                                       "--out", str(home)])
    assert result.exit_code == 0, result.output
    assert json.loads((home / "model.json").read_text())["spec"] == "tests.engine.external:tiny_embedder"


@pytest.mark.slow
def test_interpolation_reaches_the_geometry_the_report_and_the_corrupted_sets(tiny_bench, tmp_path):
    home = tmp_path / "home"
    result = CliRunner().invoke(main, [*_eval_args(tiny_bench, tmp_path), "--model",
                                       "tests.engine.external:tiny_embedder", "--input-size", "16",
                                       "--interpolation", "bicubic", "--out", str(home)])
    assert result.exit_code == 0, result.output
    assert "16 px centre crop after resizing to shorter side in the dataset's resize-to-crop proportion " \
           "(bicubic)" in result.output
    (report,) = home.glob("eval/*-test/report.json")
    geometry = json.loads(report.read_text())["geometry"]
    assert geometry == {"resize": 16, "crop": 16, "interpolation": "bicubic"}
    header = json.loads((tmp_path / "manifests" / "repeat-0.json").read_text())["header"]
    assert header["geometry"]["interpolation"] == "bicubic"


def _run_report(run):
    (report,) = run.glob("eval/*-test/report.json")
    return report


@pytest.mark.slow
def test_out_is_never_a_run_folder_inside_one_or_a_folder_of_runs(tiny_run, tiny_bench, tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(tiny_run, runs / "run")
    scored = CliRunner().invoke(main, [*_eval_args(tiny_bench, tmp_path), "--checkpoint", str(runs / "run")])
    assert scored.exit_code == 0, scored.output
    before = _run_report(runs / "run").read_bytes()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    for out, message in [(runs / "run", "a bgbias run's: another model's reports would go under the run's"),
                         (runs / "run" / "eval", f"lies inside the bgbias run folder {runs / 'run'}"),
                         (runs / "run" / "new", "lies inside the bgbias run folder"),
                         (runs, "holds bgbias runs (run): it is a runs or study folder"),
                         (tmp_path / "mine", "neither new, nor empty, nor this model's: it holds notes.txt")]:
        for command in ("eval", "explain"):
            args = (_eval_args(tiny_bench, tmp_path) if command == "eval"
                    else ["explain", *_data_args(tiny_bench), "--limit", "2"])
            result = CliRunner().invoke(main, [*args, "--model", "tests.engine.external:tiny_embedder",
                                               "--input-size", "16", "--out", str(out)])
            assert result.exit_code == 2 and message in result.output, (command, out, result.output)
            assert "--out" in result.output
    assert _run_report(runs / "run").read_bytes() == before
    assert not (runs / "run" / "model.json").exists() and not (runs / "run" / "new").exists()


def test_a_model_on_ones_own_folder_scores_every_image_by_default_and_the_report_says_why(tmp_path):
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for index in range(12):
        folder = tmp_path / "photos" / f"class{index % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)).save(folder / f"{index}.png")
    home = tmp_path / "home"
    result = CliRunner().invoke(main, ["eval", "--dataset", "folder", "--root", str(tmp_path / "photos"),
                                       "--model", "tests.engine.external:tiny_embedder", "--input-size", "16",
                                       "--device", "cpu", "--workers", "0", "--no-progress",
                                       "--out", str(home)])
    assert result.exit_code == 0, result.output
    (report_dir,) = [folder for folder in (home / "eval").iterdir() if (folder / "report.json").is_file()]
    report = json.loads((report_dir / "report.json").read_text())
    assert report["split"] == "all" and report["images"] == 12 and "did not train" in report["split_reason"]
    assert f"Split scored: {report['split_reason']}." in (report_dir / "report.md").read_text()
