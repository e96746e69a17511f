"""SIGTERM (kill, timeout, SLURM preemption, container stops, torchrun) is taken like Ctrl-C: the run or job
records that it was interrupted, the command exits with 143 (130 after Ctrl-C) without a traceback, and
running it again resumes to what an undisturbed run gives."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from bgbias.cli import main
from bgbias.engine.checkpoint import load_checkpoint
from tests.children import cli, pause_in_epoch, run_cli, start_paused

TIMING = ("train_seconds", "train_images_per_second", "epoch_start_seconds")

# Epoch 2 starts, then a data-loader worker pauses while loading its first image: the main process waits
# for the batch, as it mostly does when a SIGTERM to the whole process group (SLURM) arrives.
_PAUSE_IN_A_WORKER_IN_EPOCH_2 = """
from bgbias.data.train_images import TrainImages
from bgbias.engine.training_loop import TrainingSession
flag = marker.with_name("epoch-2")
real_steps = TrainingSession.train_steps
def train_steps(session):
    if session.state.epoch == 2:
        flag.write_text("epoch 2")
    return real_steps(session)
TrainingSession.train_steps = train_steps
real_item = TrainImages.__getitem__
def item(images, draw):
    if flag.exists():
        pause()
    return real_item(images, draw)
TrainImages.__getitem__ = item
"""


def _stop(child: subprocess.Popen, signum: int, *, group: bool) -> tuple[int, str]:
    if group:
        time.sleep(0.5)  # the main process is waiting for the paused worker's batch by now
        os.killpg(child.pid, signum)
    else:
        child.send_signal(signum)
    try:
        code = child.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        raise
    return code, child.stderr.read().decode()


def _train_args(tiny_bench: Path, workers: int) -> list[str]:
    return ["train", "--method", "triplet", "--root", str(tiny_bench / "bench"), "--epochs", "2",
            "--device", "cpu", "--workers", str(workers), "--no-progress", "--backbone", "tiny_cnn",
            "--masks", str(tiny_bench / "masks"), "--backgrounds", str(tiny_bench / "backgrounds"),
            "--set", "model.pretrained=false", "--set", "model.embedding_dim=16", "--set", "data.crop=32",
            "--set", "data.batch_size=8", "--set", "data.m_per_class=2"]


def _without_timing(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{key: value for key, value in row.items() if key not in TIMING} for row in rows]


# The children skip drawing curves.png after each epoch (it feeds nothing back into training, and
# tests/engine/test_curves.py checks it): a few seconds of each training child.
_NO_CURVES = """
from bgbias.engine import training_loop
training_loop.plot_training_curves = lambda *args, **kwargs: None
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "group", "workers", "pause", "status"),
    [
        # kill PID, timeout, a container stop: the main process only
        (signal.SIGTERM, False, 0, pause_in_epoch(2), 143),
        # SLURM, job control: the process group, data-loader workers too
        (signal.SIGTERM, True, 1, _PAUSE_IN_A_WORKER_IN_EPOCH_2, 143),
        (signal.SIGINT, False, 0, pause_in_epoch(2), 130),  # Ctrl-C
    ],
    ids=["sigterm", "sigterm-to-group-with-workers", "sigint"],
)
def test_a_signalled_training_says_interrupted_and_a_stopped_group_resumes_exactly(
        tiny_bench, tmp_path, signum, group, workers, pause, status):
    """Each signal leaves the same interrupted run (its record, epoch 1's checkpoint). Resuming runs the same
    code whichever signal stopped it (``Terminated`` is a ``KeyboardInterrupt``): it is run here, in fresh
    processes, after the hardest stop (the whole group, a data-loader worker paused mid-batch), and
    tests/engine/test_training.py resumes four methods after an interruption in process."""
    args = _train_args(tiny_bench, workers)
    killed = tmp_path / "killed"
    child, _ = start_paused(tmp_path, _NO_CURVES + pause + cli([*args, "--run-dir", str(killed)]))
    code, stderr = _stop(child, signum, group=group)

    assert code == status, stderr
    assert "interrupted by" in stderr and "Traceback" not in stderr, stderr
    record = json.loads((killed / "run.json").read_text())
    assert record["status"] == "interrupted"
    stopped_by = "Terminated: stopped by SIGTERM" if signum == signal.SIGTERM else "KeyboardInterrupt"
    assert record["error"] == stopped_by
    assert load_checkpoint(killed / "checkpoints" / "last.pt")["epoch"] == 1
    if not group:
        return

    resumed = run_cli(["train", "--resume", str(killed), "--no-progress"], prelude=_NO_CURVES)
    assert resumed.returncode == 0, resumed.stderr
    whole = tmp_path / "undisturbed"
    undisturbed = run_cli([*args, "--run-dir", str(whole)], prelude=_NO_CURVES)
    assert undisturbed.returncode == 0, undisturbed.stderr
    assert _without_timing(killed) == _without_timing(whole)
    a = load_checkpoint(killed / "checkpoints" / "last.pt")["model"]
    b = load_checkpoint(whole / "checkpoints" / "last.pt")["model"]
    assert all(torch.equal(a[key], b[key]) for key in a)
    assert json.loads((killed / "run.json").read_text())["status"] == "finished"


_PAUSE_AFTER_TWO_LEDGER_LINES = """
from bgbias.ledger import LedgerLog
real_append = LedgerLog.append
appended = []
def append(self, record):
    real_append(self, record)
    appended.append(record)
    if len(appended) == 2:
        pause()
LedgerLog.append = append
"""
_FAKE_MASK_SESSION = """
from bgbias.saliency import pipeline
from tests.saliency.fakes import FakeSession
pipeline.open_session = lambda *args, **options: FakeSession()
"""


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_mask_job_stopped_by_sigterm_exits_143_and_resumes_to_the_same_bytes(tiny_bench, tmp_path,
                                                                              monkeypatch):
    from bgbias.saliency import pipeline
    from tests.saliency.fakes import FakeSession

    monkeypatch.setattr(pipeline, "open_session", lambda *_args, **_options: FakeSession())
    args = ["masks", "--dataset", "bench", "--root", str(tiny_bench / "bench")]
    whole = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "whole")])
    assert whole.exit_code == 0, whole.output

    out = tmp_path / "stopped"
    child, _ = start_paused(tmp_path, _FAKE_MASK_SESSION + _PAUSE_AFTER_TWO_LEDGER_LINES
                            + cli([*args, "--out", str(out)]))
    code, stderr = _stop(child, signal.SIGTERM, group=False)
    assert code == 143 and "interrupted by SIGTERM" in stderr and "Traceback" not in stderr, stderr
    assert not list(out.rglob("*.tmp"))  # the interrupted writer removed its temporaries

    again = CliRunner().invoke(main, [*args, "--out", str(out)])
    assert again.exit_code == 0, again.output
    assert _files(out) == _files(tmp_path / "whole")


@pytest.mark.slow
def test_a_render_stopped_by_sigterm_exits_143_and_resumes_to_the_same_bytes(tiny_bench, tmp_path):
    args = ["corrupt", "--dataset", "bench", "--root", str(tiny_bench / "bench"), "--repeats", "1",
            "--backgrounds", str(tiny_bench / "backgrounds"), "--masks", str(tiny_bench / "masks"),
            "--out", str(tmp_path / "manifests")]
    whole = CliRunner().invoke(main, [*args, "--render", str(tmp_path / "whole")])
    assert whole.exit_code == 0, whole.output

    out = tmp_path / "stopped"
    child, _ = start_paused(tmp_path, _PAUSE_AFTER_TWO_LEDGER_LINES + cli([*args, "--render", str(out)]))
    code, stderr = _stop(child, signal.SIGTERM, group=False)
    assert code == 143 and "interrupted by SIGTERM" in stderr and "Traceback" not in stderr, stderr

    again = CliRunner().invoke(main, [*args, "--render", str(out)])
    assert again.exit_code == 0, again.output
    assert _files(out) == _files(tmp_path / "whole")


def test_sigterm_raises_terminated_in_the_block_and_the_old_handling_comes_back():
    from bgbias.signals import Terminated, sigterm_as_interrupt

    before = signal.getsignal(signal.SIGTERM)
    assert before is signal.SIG_DFL
    with pytest.raises(Terminated), sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises here, at once
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_handler_the_program_installed_is_left_alone():
    from bgbias.signals import sigterm_as_interrupt

    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: seen.append(signum))
    try:
        with sigterm_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)
