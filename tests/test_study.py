"""The study keeps what is done: a matching bench, finished runs."""

from __future__ import annotations

import json

from bgbias.bench.build import BENCH_FORMAT
from bgbias.engine.config import resolve_config
from bgbias.study import STUDY_METHOD, built_bench, train_study_run


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
    run = tmp_path / f"{STUDY_METHOD}-bgaugment"
    run.mkdir()
    config = resolve_config(STUDY_METHOD, "bench", options={"bgaugment.enabled": True})
    (run / "config.json").write_text(json.dumps(config.as_dict()))
    (run / "run.json").write_text(json.dumps({"status": "finished"}))
    lines = []
    assert train_study_run(tmp_path, True, "cpu", lines.append, "5/7") == run
    assert lines == [f"5/7 {STUDY_METHOD} + BGAugment: trained already ({run})"]
