"""The public API: lazy names on `bgbias`, and each function doing what its command does."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import bgbias
from bgbias.errors import ModelError
from bgbias.retrieval.metrics import score_embeddings
from tests.engine.external import tiny_embedder

ROOT = Path(__file__).resolve().parents[1]


def test_importing_bgbias_loads_no_heavy_library_and_every_public_name_resolves():
    code = ("import sys, bgbias; "
            "print([m for m in ('torch', 'numpy', 'PIL', 'faiss') if m in sys.modules])")
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""}).stdout
    assert printed.strip() == "[]"
    assert all(callable(getattr(bgbias, name)) for name in bgbias.__all__)
    assert set(bgbias.__all__) <= set(dir(bgbias))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        bgbias.nothing  # noqa: B018


def _options(bench):
    return dict(root=bench / "bench", masks=bench / "masks", backgrounds=bench / "backgrounds", repeats=2,
                workers=0)


def test_a_run_folder_is_scored_as_bgbias_eval_scores_it(tiny_run, tiny_bench, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    result = bgbias.evaluate(run, "bench", manifests=tmp_path / "manifests", **_options(tiny_bench))
    assert result.out_dir.parent == run / "eval" and result.report["method"] == "triplet"
    again = bgbias.evaluate(run / "checkpoints" / "best.pt", "bench", manifests=tmp_path / "manifests",
                            **_options(tiny_bench))
    assert again.embedded == 0 and again.report["clean"] == result.report["clean"]


def test_a_function_is_scored_only_under_a_fingerprint(tiny_bench, tmp_path):
    module = tiny_embedder().eval()
    with pytest.raises(ModelError, match="fingerprint="):
        bgbias.evaluate(lambda x: module(x), "bench", out=tmp_path / "a", **_options(tiny_bench))
    result = bgbias.evaluate(lambda x: module(x), "bench", fingerprint="tiny-v1", corrupted=False,
                             out=tmp_path / "a", **_options(tiny_bench))
    as_module = bgbias.evaluate(module, "bench", corrupted=False, out=tmp_path / "b", **_options(tiny_bench))
    assert result.clean.map_at_r == pytest.approx(as_module.clean.map_at_r, abs=1e-6)
    with pytest.raises(ModelError, match="cannot score a int"):
        bgbias.evaluate(3, "bench")


def test_precomputed_embeddings_make_the_report_of_their_scores(tmp_path):
    rng = np.random.default_rng(1)
    labels = np.repeat(np.arange(6), 4)
    clean = rng.normal(size=(24, 8)).astype(np.float32)
    corrupted = [clean + rng.normal(size=clean.shape).astype(np.float32) for _ in range(2)]
    result = bgbias.evaluate_embeddings(torch.from_numpy(clean), torch.from_numpy(labels), corrupted,
                                        out=tmp_path / "report", about={"method": "mine"})
    assert result.report["clean"]["map_at_r"] == pytest.approx(score_embeddings(clean, labels).map_at_r)
    assert result.report["corrupted"]["repeats"][1]["map_at_r"] == pytest.approx(
        score_embeddings(corrupted[1], labels).map_at_r)
    assert result.report["method"] == "mine" and (tmp_path / "report" / "report.md").is_file()
    assert bgbias.evaluate_embeddings(clean, labels).files == {}


def test_corrupted_sets_go_where_evaluation_looks(tiny_bench, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    made = bgbias.make_corrupted_sets("bench", tiny_bench / "bench", repeats=2,
                                      variants=["random-bg", "only-fg"],
                                      backgrounds=tiny_bench / "backgrounds")
    paths = made["random-bg"]
    key = paths[0].parts[1]
    assert [p.as_posix() for p in paths] == [f"corrupted/{key}/test/seed-0/repeat-{r}.json" for r in (0, 1)]
    assert [p.parent.as_posix() for p in made["only-fg"]] == [f"corrupted/{key}/test/seed-0/only-fg"]
