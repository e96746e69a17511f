"""`bgbias eval`, `bgbias explain` and `bgbias report` from the command line."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner
from PIL import Image

from bgbias.cli import main
from bgbias.data.registry import open_dataset
from bgbias.report.compare import compare_runs


def _eval_args(run, bench, tmp_path):
    return ["eval", "--checkpoint", str(run), "--root", str(bench / "bench"), "--corrupted", "--repeats", "2",
            "--masks", str(bench / "masks"), "--backgrounds", str(bench / "backgrounds"),
            "--manifests", str(tmp_path / "manifests"), "--workers", "0", "--device", "cpu", "--no-progress"]


@pytest.mark.slow
def test_eval_explain_then_report(tiny_run, tiny_bench, tmp_path):
    run = tmp_path / "runs" / "run"
    shutil.copytree(tiny_run, run)
    result = CliRunner().invoke(main, _eval_args(run, tiny_bench, tmp_path))
    assert result.exit_code == 0, result.output
    assert "triplet on bench test (12 images" in result.output
    assert "corrupted (2 repeats)" in result.output and "report.md" in result.output
    explain_args = ["explain", "--checkpoint", str(run), "--limit", "3", "--gallery", "2", "--device", "cpu",
                    "--no-progress"]
    explained = CliRunner().invoke(main, explain_args)
    assert explained.exit_code == 0, explained.output
    key = open_dataset("bench", tiny_bench / "bench").key  # the explain folder's name (not the usual folder)
    summary = json.loads((run / "explain" / f"{key}-test-smoothgrad" / "summary.json").read_text())
    assert summary["images"] == 3 and "gallery.png" in explained.output
    table = CliRunner().invoke(main, ["report", "--runs", str(tmp_path / "runs")])
    assert table.exit_code == 0, table.output
    assert "| triplet |" in table.output and "| triplet + BGAugment |" in table.output
    assert f"{key} fg score" in table.output and f"{summary['mean']:.2f}" in table.output
    assert (tmp_path / "runs" / "report" / "table.md").is_file()


def test_eval_without_any_run_names_the_train_command(tmp_path):
    result = CliRunner().invoke(main, ["eval", "--runs", str(tmp_path)])
    assert result.exit_code == 2
    assert "there is no training run yet" in result.output and "bgbias train" in result.output


def test_report_of_a_run_that_was_never_evaluated(tiny_run, tmp_path):
    empty = CliRunner().invoke(main, ["report", "--runs", str(tmp_path)])
    assert empty.exit_code == 2 and "no run in" in empty.output
    result = CliRunner().invoke(main, ["report", str(tiny_run), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "bgbias eval --checkpoint" in result.output


@pytest.mark.slow
def test_report_draws_two_explained_runs_side_by_side(tiny_run, tiny_bench, tmp_path):
    runs = tmp_path / "runs"
    for name, bgaugment in (("vanilla", False), ("bgaugment", True)):
        shutil.copytree(tiny_run, runs / name)
        config = json.loads((runs / name / "config.json").read_text())
        config["bgaugment"]["enabled"] = bgaugment
        (runs / name / "config.json").write_text(json.dumps(config))
        explained = CliRunner().invoke(main, ["explain", "--checkpoint", str(runs / name), "--limit", "4",
                                              "--gallery", "3", "--device", "cpu", "--no-progress"])
        assert explained.exit_code == 0, explained.output
    galleries = compare_runs([runs / "vanilla", runs / "bgaugment"], "test", tmp_path / "out")
    key = open_dataset("bench", tiny_bench / "bench").key
    assert [g.name for g in galleries] == [f"foreground-{key}-test.png"]
    width, height = Image.open(galleries[0]).size
    assert width > 4 * 100 and height > 3 * 100  # image | mask | two overlays; three rows


@pytest.mark.slow
def test_eval_profile_prints_it_and_report_gives_it_a_row(tiny_run, tiny_bench, tmp_path):
    run = tmp_path / "runs" / "run"
    shutil.copytree(tiny_run, run)
    args = [arg for arg in _eval_args(run, tiny_bench, tmp_path) if arg != "--corrupted"]
    result = CliRunner().invoke(main, [*args, "--profile", "--worst-k", "3"])
    assert result.exit_code == 0, result.output
    assert "profile set" in result.output and "bg-gap" in result.output
    assert "lowest of 3 backgrounds per query" in result.output
    table = CliRunner().invoke(main, ["report", "--runs", str(tmp_path / "runs")])
    assert table.exit_code == 0, table.output
    assert "background-reliance profile (MAP@R, %)" in table.output
    assert "| method | measured on | clean | repasted | random-bg | query-side | worst-case |" in table.output


@pytest.mark.slow
def test_report_study_aggregates_training_seeds_into_one_page(tiny_run, tiny_bench, tmp_path):
    runs = tmp_path / "runs"
    names = []
    for seed in (0, 1):
        for bgaugment in (False, True):
            name = f"triplet{'-bgaugment' if bgaugment else ''}-seed{seed}"
            shutil.copytree(tiny_run, runs / name)
            config = json.loads((runs / name / "config.json").read_text())
            config["bgaugment"]["enabled"], config["seed"] = bgaugment, seed
            (runs / name / "config.json").write_text(json.dumps(config))
            evaluated = CliRunner().invoke(main, _eval_args(runs / name, tiny_bench, tmp_path))
            assert evaluated.exit_code == 0, evaluated.output
            names.append(str(runs / name))
    # In any order (a shell glob puts -bgaugment first), the page's pair is vanilla then BGAugment of seed 0.
    result = CliRunner().invoke(main, ["report", "--study", "--title", "tiny study", "--out",
                                       str(tmp_path / "out"), *names[::-1]])
    assert result.exit_code == 0, result.output
    assert "| triplet | 2 (0, 1) |" in result.output  # Table 1 over seeds: their count and ids, side by side
    markdown = (tmp_path / "out" / "study.md").read_text()
    galleries = [markdown.index(f"*retrieval gallery of {name}:") for name in ("triplet-seed0",
                                                                               "triplet-bgaugment-seed0")]
    assert galleries == sorted(galleries) and "gallery of triplet-seed1" not in markdown
    # Both settings are copies of one run on the same corrupted sets: the same scores, told apart by nothing.
    for seed in (0, 1):
        assert f"| triplet | {seed} | +0.00 \\[+0.00, +0.00\\] | 1.000 |" in markdown
    assert "| paired by draw |" in markdown
    page = (tmp_path / "out" / "study.html").read_text()
    assert "<title>tiny study</title>" in page and "data:image/png;base64," in page
    assert {"seeds.md", "table.md", "per-class-drop.png"} <= {p.name for p in (tmp_path / "out").iterdir()}
