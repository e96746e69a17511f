"""examples/train_with_bgaugment.py: BGAugment in a plain PyTorch loop, then the API's evaluation."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from bgbias.report.evaluation import load_evaluation_report

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_with_bgaugment.py"


@pytest.mark.slow
def test_the_example_trains_one_epoch_and_scores_the_model(tiny_bench, tmp_path, monkeypatch, capsys):
    out = tmp_path / "report"
    monkeypatch.chdir(tmp_path)  # the example's corrupted sets go to the working folder's corrupted/
    monkeypatch.setattr(sys, "argv", [
        str(EXAMPLE), "--root", str(tiny_bench / "bench"), "--masks", str(tiny_bench / "masks"),
        "--backgrounds", str(tiny_bench / "backgrounds"), "--epochs", "1", "--batch", "8", "--workers", "0",
        "--repeats", "2", "--out", str(out),
    ])
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    printed = capsys.readouterr().out
    assert "epoch 1: loss" in printed and "corrupted (2 repeats)" in printed
    (report_json,) = out.glob("eval/*-test/report.json")
    report = load_evaluation_report(report_json)
    model = report.model_extra["model"]
    assert model["kind"] == "module" and model["name"] == "MobileNetV2"
    assert len(report.corrupted.repeats) == 2 and report.images == 12


@pytest.mark.slow
def test_the_example_starts_in_a_fresh_interpreter():
    """Its imports as a reader's run meets them (in the suite's process much is imported already)."""
    started = subprocess.run([sys.executable, str(EXAMPLE), "--help"], capture_output=True, text=True,
                             timeout=120)
    assert started.returncode == 0, started.stderr
    assert "--backgrounds" in started.stdout
