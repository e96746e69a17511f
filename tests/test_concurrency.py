"""Two processes on one output: the second waits for what is shared (the bench), skips what the first is
doing (a study's run) or is refused at once with the reason (a second trainer of a run, a second explanation
into a folder), and never records a failure for it."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

from bgbias.cli import main
from tests.children import cli, pause_in_epoch, start_paused


@contextmanager
def paused_child(tmp_path: Path, code: str) -> Iterator[tuple[subprocess.Popen, Path]]:
    """A child process running ``code`` (:mod:`tests.children`), once it paused, and its go file. The child
    is let go and waited for at the end (its exit status must be 0)."""
    child, go = start_paused(tmp_path, code)
    try:
        yield child, go
        go.touch()
        assert child.wait(120) == 0, child.stderr.read().decode()
    finally:
        go.touch()
        if child.poll() is None:
            child.wait(120)


def _train_args(tiny_bench: Path) -> list[str]:
    return ["train", "--method", "triplet", "--root", str(tiny_bench / "bench"), "--epochs", "1",
            "--device", "cpu", "--workers", "0", "--no-progress", "--backbone", "tiny_cnn",
            "--set", "model.pretrained=false", "--set", "data.crop=32", "--set", "data.batch_size=8",
            "--set", "data.m_per_class=2"]


@pytest.mark.slow
def test_a_second_trainer_of_a_run_is_refused_at_once_naming_the_run_and_its_process(tiny_bench, tmp_path):
    run = tmp_path / "run"
    args = [*_train_args(tiny_bench), "--run-dir", str(run)]
    code = pause_in_epoch(1) + cli(args)
    with paused_child(tmp_path, code) as (child, _go):
        for second in (["train", "--resume", str(run), "--no-progress"], args):
            result = CliRunner().invoke(main, second)
            assert result.exit_code == 2, result.output
            assert "another process is training this run" in result.output, result.output
            assert f"(pid {child.pid} on " in result.output and str(run) in result.output
            assert "Traceback" not in result.output
        assert json.loads((run / "run.json").read_text())["status"] == "running"
    assert json.loads((run / "run.json").read_text())["status"] == "finished"


_STUDY_PASS = """
import json, os
from pathlib import Path
from types import SimpleNamespace
from bgbias.study import runs
from bgbias.study.plan import StudyPlan

folder = Path({folder!r})

def train_study_run(folder, run, bench, device, log, step):
    if run.folder_name == "multi_similarity-seed0":
        pause()
    with open(folder / "calls.log", "a") as calls:
        calls.write(f"train {{run.folder_name}} {{os.getpid()}}\\n")
    (folder / run.folder_name / "run.json").write_text(json.dumps({{"status": "finished"}}))
    return folder / run.folder_name

def measure_run(run_dir, *args):
    with open(run_dir.parent / "calls.log", "a") as calls:
        calls.write(f"measure {{run_dir.name}} {{os.getpid()}}\\n")

runs.train_study_run, runs.measure_run = train_study_run, measure_run
plan = StudyPlan(("multi_similarity",), 1)
run_dirs, failures = runs.train_and_measure(plan, SimpleNamespace(masks_dir=folder / "masks"), folder, "cpu",
                                            lambda line: None)
assert not failures and len(run_dirs) == 2, (run_dirs, failures)
"""


def test_two_study_passes_on_one_folder_share_the_runs(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from bgbias.study import runs
    from bgbias.study.plan import StudyPlan

    folder = tmp_path / "study"
    folder.mkdir()

    def train_study_run(folder, run, bench, device, log, step):
        with open(folder / "calls.log", "a") as calls:
            calls.write(f"train {run.folder_name} {os.getpid()}\n")
        return folder / run.folder_name

    def measure_run(run_dir, *args):
        with open(run_dir.parent / "calls.log", "a") as calls:
            calls.write(f"measure {run_dir.name} {os.getpid()}\n")

    monkeypatch.setattr(runs, "train_study_run", train_study_run)
    monkeypatch.setattr(runs, "measure_run", measure_run)
    with paused_child(tmp_path, _STUDY_PASS.format(folder=str(folder))) as (child, go):
        lines = []

        def log(line: str) -> None:
            lines.append(line)
            if "waiting for the other process" in line:
                go.touch()  # the first pass may finish the run it holds now

        plan = StudyPlan(("multi_similarity",), 1)
        bench = SimpleNamespace(masks_dir=folder / "masks")
        run_dirs, failures = runs.train_and_measure(plan, bench, folder, "cpu", log)
    assert failures == {} and not (folder / runs.FAILURES).exists()
    assert run_dirs == [folder / "multi_similarity-seed0", folder / "multi_similarity-bgaugment-seed0"]
    assert any("multi_similarity, seed 0: another process is training it; measured at the end" in line
               for line in lines)
    calls = (folder / "calls.log").read_text().splitlines()
    me, other = str(os.getpid()), str(child.pid)
    # This pass took the run the first one was not on, then waited for the held one and measured it after the
    # first pass had finished it (in a real study: kept, and measured from the caches).
    assert calls.index(f"train multi_similarity-bgaugment-seed0 {me}") < calls.index(
        f"train multi_similarity-seed0 {other}")
    assert calls.index(f"measure multi_similarity-seed0 {other}") < calls.index(
        f"train multi_similarity-seed0 {me}")


_BUILD_BENCH = """
import json
from pathlib import Path
from bgbias.study import bench
from bgbias.bench.build import BENCH_FORMAT
import bgbias.assets.fetch, bgbias.data.registry

def prepare_bench(root, *, preset, rho, seed, home):
    pause()
    Path(root).mkdir(parents=True, exist_ok=True)
    description = {{"format": BENCH_FORMAT, "parameters": {{"preset": preset, "rho": rho, "seed": seed}},
                   "summary": {{"built by": "the first process"}}}}
    (Path(root) / "bench.json").write_text(json.dumps(description))
    return {{"root": str(root)}}

bgbias.assets.fetch.fetch = lambda *args, **options: []
bgbias.data.registry.open_dataset = lambda *args: None
bench.prepare_pools = lambda **options: {{}}
bench.bench_masks = lambda dataset, source, log: (None, Path({masks!r}))
bench.prepare_bench = prepare_bench
bench.prepare_study_bench("ground-truth", "small", 0.9, 0, None, print)
"""


def test_a_second_process_waits_for_the_bench_and_keeps_it(tmp_path, monkeypatch):
    import bgbias.assets.fetch
    import bgbias.data.registry
    from bgbias.study import bench as study_bench

    monkeypatch.setenv("BGBIAS_DATA", str(tmp_path / "data"))
    built = []
    monkeypatch.setattr(bgbias.assets.fetch, "fetch", lambda *args, **options: [])
    monkeypatch.setattr(bgbias.data.registry, "open_dataset", lambda *args: None)
    monkeypatch.setattr(study_bench, "prepare_pools", lambda **options: {})
    monkeypatch.setattr(study_bench, "bench_masks", lambda dataset, source, log: (None, tmp_path / "masks"))
    monkeypatch.setattr(study_bench, "prepare_bench", lambda *args, **options: built.append(args))
    with paused_child(tmp_path, _BUILD_BENCH.format(masks=str(tmp_path / "masks"))) as (_child, go):
        threading.Timer(0.5, go.touch).start()  # the first process finishes while this one waits
        lines = []
        bench = study_bench.prepare_study_bench("ground-truth", "small", 0.9, 0, None, lines.append)
    assert built == []
    assert bench.bench["built by"] == "the first process"
    assert any("is up to date" in line for line in lines)


def test_a_second_explanation_into_a_folder_is_refused_while_the_first_runs(tiny_run, tiny_bench, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    args = ["explain", "--checkpoint", str(run), "--device", "cpu", "--limit", "2",
            "--masks", str(tiny_bench / "masks"), "--no-progress"]
    assert CliRunner().invoke(main, args).exit_code == 0
    (folder,) = [path for path in (run / "explain").iterdir() if path.is_dir()]
    code = f"""
from bgbias.fileio import exclusive_lock, folder_lock_path
with exclusive_lock(folder_lock_path({str(folder)!r}), wait=False):
    pause()
"""
    with paused_child(tmp_path, code):
        result = CliRunner().invoke(main, [*args, "--force"])
    assert result.exit_code == 2 and "another process is explaining into" in result.output, result.output
    assert str(folder) in result.output
