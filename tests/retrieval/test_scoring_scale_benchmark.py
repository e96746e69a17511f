"""benchmarks/scoring_scale.py's runs at a tiny size: its CUDA mode's torch path checked on the CPU
(``--device cpu``), and its default faiss mode, each printing the three contenders' lines, bgbias's MAP@R
equal to PML's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("device", [["--device", "cpu"], []])
def test_the_scale_benchmark_runs_its_three_contenders_and_agrees_with_pml(device):
    pytest.importorskip("pytorch_metric_learning")
    if not device:
        pytest.importorskip("faiss")
    command = [sys.executable, str(ROOT / "benchmarks" / "scoring_scale.py"), "--images", "900", "--dim", "8",
               "--classes", "40", "--big-class", "300", "--max-memory", "300000", *device]
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=300, check=True)
    lines = {line.split(":")[0]: line for line in done.stdout.splitlines()}
    assert "failed" not in done.stdout, done.stdout
    assert "k 14..299" in lines["floor"] and "× CPU" in lines["bgbias"], done.stdout
    scores = {name: re.search(r"MAP@R ([0-9.]+)", lines[name]).group(1) for name in ("bgbias", "pml")}
    assert scores["bgbias"] == scores["pml"], done.stdout
