"""Two processes on one output: the second waits for what is shared (the bench), takes another step of a
study's plan than the first is doing (a run) or is refused at once with the reason (a second trainer of a
run, a second explanation into a folder), and never records a failure for it."""

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
            "--set", "data.m_per_class=2", "--set", "data.batches_per_epoch=1",
            "--set", "schedule.validate_untrained=false"]


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


_STUDY = """
from pathlib import Path
from bgbias.study.local import Slot
from bgbias.study.pipeline import run_study
from bgbias.study.plan import StudyPlan
from bgbias.study.spec import StudySpec
from bgbias.study.worker import Timing
from tests.study.standins import recording_steps

folder = Path({folder!r})
for (module, name), stand_in in recording_steps(folder, "multi_similarity-seed0", pause).items():
    setattr(module, name, stand_in)
result = run_study(folder, StudySpec.model_validate_json({spec!r}), StudyPlan(("multi_similarity",), 1),
                   slots=[Slot("cpu")], log=lambda line: None, timing=Timing(poll_every={poll}))
assert not result.failures and len(result.runs) == 2, result
"""


@pytest.mark.slow
def test_two_studies_on_one_folder_share_the_steps_and_each_runs_once(tmp_path, monkeypatch):
    """The same `bgbias study` twice on one folder (two terminals, or two machines sharing it): the second
    takes the run the first is not on instead of waiting for it, each step runs once, and the page is
    written once both runs are done, by either."""
    from bgbias.study.ledger import read_plan
    from bgbias.study.local import Slot
    from bgbias.study.pipeline import run_study
    from bgbias.study.plan import StudyPlan
    from bgbias.study.spec import bench_spec
    from bgbias.study.worker import Timing
    from tests.study.standins import recorded_calls, recording_steps

    folder = tmp_path / "study"
    folder.mkdir()
    spec = bench_spec("small", 0.9, 0, "ground-truth", tmp_path / "pools")
    for (module, name), stand_in in recording_steps(folder).items():
        monkeypatch.setattr(module, name, stand_in)
    timing = Timing(poll_every=0.05)
    code = _STUDY.format(folder=str(folder), spec=spec.model_dump_json(), poll=timing.poll_every)
    with paused_child(tmp_path, code) as (child, go):  # the first study holds multi_similarity-seed0
        # Should this study wait for the held run instead, the first goes on after a while (and the order
        # of the calls below says so).
        deadline = threading.Timer(60, go.touch)
        deadline.start()

        def log(line: str) -> None:
            if line == "[run/multi_similarity-bgaugment-seed0] done":
                go.touch()  # the first study may finish the run it holds now

        try:
            result = run_study(folder, spec, StudyPlan(("multi_similarity",), 1), slots=[Slot("cpu")],
                               log=log, timing=timing)
        finally:
            deadline.cancel()
    assert result.failures == {}
    assert result.runs == [folder / "multi_similarity-seed0", folder / "multi_similarity-bgaugment-seed0"]
    me, other = str(os.getpid()), str(child.pid)
    calls = recorded_calls(folder)
    assert sorted(line.rsplit(" ", 1)[0] for line in calls) == sorted([
        "prepare", "train multi_similarity-seed0", "measure multi_similarity-seed0",
        "train multi_similarity-bgaugment-seed0", "measure multi_similarity-bgaugment-seed0", "page 2 runs"])
    assert calls[0] == f"prepare {other}"
    assert calls.index(f"measure multi_similarity-bgaugment-seed0 {me}") < calls.index(
        f"train multi_similarity-seed0 {other}")
    assert calls[-1].startswith("page 2 runs ")
    plan = read_plan(folder)
    assert all(step.state == "done" and step.attempts == 1 and step.error is None
               for step in plan.steps.values())


_BUILD_BENCH = """
import json
from pathlib import Path
from bgbias.study import bench
from bgbias.study.spec import StudySpec
from bgbias.bench.build import BENCH_FORMAT
import bgbias.assets.fetch

def prepare_bench(root, *, preset, rho, seed):
    pause()
    Path(root).mkdir(parents=True, exist_ok=True)
    description = {{"format": BENCH_FORMAT, "version": 1,
                   "parameters": {{"preset": preset, "rho": rho, "seed": seed}},
                   "summary": {{"built by": "the first process"}}}}
    (Path(root) / "bench.json").write_text(json.dumps(description))
    return {{"root": str(root)}}

bgbias.assets.fetch.fetch = lambda *args, **options: []
bench.prepare_pools = lambda **options: {{}}
bench.prepare_bench = prepare_bench
bench.prepare_study_bench(StudySpec.model_validate_json({spec!r}), print)
"""


@pytest.mark.slow
def test_a_second_process_waits_for_the_bench_and_keeps_it(tmp_path, monkeypatch):
    import bgbias.assets.fetch
    from bgbias.study import bench as study_bench
    from bgbias.study.spec import bench_spec

    monkeypatch.setenv("BGBIAS_DATA", str(tmp_path / "data"))
    spec = bench_spec("small", 0.9, 0, "u2netp", tmp_path / "pools")
    built = []
    monkeypatch.setattr(bgbias.assets.fetch, "fetch", lambda *args, **options: [])
    monkeypatch.setattr(study_bench, "prepare_pools", lambda **options: {})
    monkeypatch.setattr(study_bench, "prepare_bench", lambda *args, **options: built.append(args))
    with paused_child(tmp_path, _BUILD_BENCH.format(spec=spec.model_dump_json())) as (_child, go):
        threading.Timer(0.5, go.touch).start()  # the first process finishes while this one waits
        lines = []
        study_bench.prepare_study_bench(spec, lines.append)
    assert built == []
    description = json.loads((tmp_path / "data" / "bench" / "bench.json").read_text())
    assert description["summary"] == {"built by": "the first process"}
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
