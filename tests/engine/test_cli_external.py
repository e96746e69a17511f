"""`bgbias eval --model` and `bgbias explain --model` from the command line, and `bgbias report` tables that
mix trained runs with external models."""

from __future__ import annotations

import json
import shutil

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


def test_an_exported_model_has_its_runs_profile(tiny_run, tiny_bench, tmp_path):
    """The profile is measured for any model: a TorchScript export of a run gets the run's profile."""
    runs = tmp_path / "runs"
    shutil.copytree(tiny_run, runs / "run")
    args = [arg for arg in _eval_args(tiny_bench, tmp_path) if arg != "--corrupted"]
    args += ["--profile", "--worst-k", "3"]
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
