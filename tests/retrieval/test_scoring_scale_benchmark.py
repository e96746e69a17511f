"""benchmarks/scoring_scale.py's runs at a tiny size: its CUDA mode's torch path checked on the CPU
(``--device cpu``) with the three contenders, bgbias's MAP@R equal to PML's, and its default faiss mode,
whose bgbias gives the same MAP@R (PML, a process of its own, is left out there)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*options: str) -> dict[str, str]:
    command = [sys.executable, str(ROOT / "benchmarks" / "scoring_scale.py"), "--images", "900", "--dim", "8",
               "--classes", "40", "--big-class", "300", "--max-memory", "300000", *options]
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=300, check=True)
    assert "failed" not in done.stdout, done.stdout
    lines = {line.split(":")[0]: line for line in done.stdout.splitlines()}
    assert "k 14..299" in lines["floor"] and "× CPU" in lines["bgbias"], done.stdout
    return {name: re.search(r"MAP@R ([0-9.]+)", line).group(1) for name, line in lines.items()
            if name in ("bgbias", "pml")}


@pytest.mark.slow
def test_the_scale_benchmark_runs_its_contenders_and_agrees_with_pml_on_the_torch_and_faiss_paths():
    pytest.importorskip("pytorch_metric_learning")
    pytest.importorskip("faiss")
    on_torch = _run("--device", "cpu")
    assert on_torch["bgbias"] == on_torch["pml"]
    assert _run("--contenders", "floor,bgbias") == {"bgbias": on_torch["pml"]}
