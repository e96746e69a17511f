"""``bgbias study`` on the tiny CUB, Cars196 and SOP replicas, from the command line: it ends with the page;
two workers write the same bytes as one; a worker or the whole command killed mid-run, then the same command
again, writes the same page; two commands started at once on one folder train each run once.

Each study is as small as its check allows: two methods (one of them DCML, whose environment weights draw
randomness of their own) and one seed, so four runs, two workers' worth each; two epochs of three batches
(a checkpoint to resume from, a second epoch to kill a worker in); two explained images. The reference
study with one worker is made once (a module fixture) and read by every test that compares bytes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bgbias.data.registry import open_dataset
from tests.replicas import copy_ground_truth_masks, make_cars, make_cub, make_sop
from tests.u2netp import provide_u2netp

pytestmark = pytest.mark.slow
SHARES_THE_REFERENCE = pytest.mark.xdist_group("study-end-to-end")
"""One xdist worker takes the tests that compare with the reference study, so that it is made once."""

TINY = ("model.backbone=tiny_cnn", "model.pretrained=false", "model.embedding_dim=16", "data.batch_size=8",
        "data.m_per_class=2", "data.workers=0", "data.crop=32", "schedule.epochs=2",
        "data.batches_per_epoch=3", "schedule.validate_untrained=false")
PLAN = ("--methods", "multi_similarity,dcml", "--seeds", "1")
RUNS = 4
"""The plan's runs: both methods without and with BGAugment."""
CARS_CLASS_IDS = (1, 2, 73, 74, 75, 76, 97, 98, 99, 100, 195, 196)
WALL_CLOCK = ("seconds", "elapsed", "created", "finished", "started", "images_per_second", "duration")


def _pools(folder: Path) -> Path:
    rng = np.random.default_rng(0)
    for pool in ("train", "test"):
        (folder / pool).mkdir(parents=True)
        for index in range(4):
            pixels = rng.integers(0, 256, (40 + 4 * index, 56, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / pool / f"bg{index}.png")
    return folder


@pytest.fixture(scope="module")
def replicas(tmp_path_factory) -> Path:
    """CUB (112 classes × 2 images: the paper's split whole, train 1-75, val 76-100, and 12 test classes; its
    segmentations as masks), Cars196 and SOP, and two pools."""
    base = tmp_path_factory.mktemp("replicas")
    cub = make_cub(base / "cub", n_classes=112, per_class=2)
    copy_ground_truth_masks(open_dataset("cub", cub).items(), base / "cub-masks")
    _pools(base / "pools")
    return base


def _command(replicas: Path, dataset: str = "cub", *extra: str) -> list[str]:
    masks = ["--masks", str(replicas / "cub-masks")] if dataset == "cub" else ["--masks", "u2netp"]
    settings = [part for setting in TINY for part in ("--set", setting)]
    return [sys.executable, "-m", "bgbias", "study", "--dataset", dataset, "--root", str(replicas / dataset),
            *masks, "--backgrounds", str(replicas / "pools"), *settings, "--explain-images", "2",
            "--devices", "cpu", *extra]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parents[2])}


def _study(cwd: Path, command: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    cwd.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(command, cwd=cwd, env={**_env(), **env}, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _folder(cwd: Path) -> Path:
    (folder,) = (cwd / "runs" / "study").iterdir()
    return folder


def _reports(cwd: Path) -> dict[str, bytes]:
    """The page's files and every run's evaluation and explanation reports, by path in the study folder;
    JSON with its wall-clock fields left out."""
    folder = _folder(cwd)
    files = [path for path in folder.rglob("*") if path.is_file() and (
        path.parent.name.startswith("report") or path.name in ("report.json", "summary.json", "table.csv"))]
    return {str(path.relative_to(folder)): _without_wall_clock(path) for path in sorted(files)}


def _without_wall_clock(path: Path) -> bytes:
    if path.suffix != ".json":
        return path.read_bytes()

    def strip(value):
        if isinstance(value, dict):
            return {key: strip(item) for key, item in value.items()
                    if not any(word in key for word in WALL_CLOCK)}
        if isinstance(value, list):
            return [strip(item) for item in value]
        return value
    return json.dumps(strip(json.loads(path.read_text())), sort_keys=True).encode()


@pytest.fixture(scope="module")
def one_worker(replicas, tmp_path_factory) -> Path:
    """The reference: the study of :data:`PLAN` with one worker."""
    cwd = tmp_path_factory.mktemp("one-worker")
    _study(cwd, _command(replicas, "cub", *PLAN))
    return cwd


@SHARES_THE_REFERENCE
def test_the_study_of_a_cub_replica_ends_with_the_page_and_two_workers_write_the_same_bytes(
        replicas, one_worker, tmp_path):
    folder = _folder(one_worker)
    (page,) = folder.glob("report*/study.html")
    assert "multi_similarity + BGAugment" in (page.parent / "study.md").read_text()
    plan = json.loads((folder / "plan.json").read_text())
    assert {step["state"] for step in plan["steps"].values()} == {"done"} and len(plan["steps"]) == RUNS + 2
    _study(tmp_path, _command(replicas, "cub", *PLAN, "--workers", "2"))
    workers = {json.loads((_folder(tmp_path) / "plan.json").read_text())["steps"][step]["claim"] is None
               for step in plan["steps"]}
    assert workers == {True}
    reference, two = _reports(one_worker), _reports(tmp_path)
    assert len(reference) > 4 * RUNS and reference.keys() == two.keys()  # reports of every run and the page
    assert [name for name in reference if reference[name] != two[name]] == []


def _wait_for(predicate, what: str, timeout: float = 300.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _running_run(cwd: Path, other_than: int | None = None):
    """The pid of a worker process running a run step (not ``other_than``), once it has trained a batch."""
    try:
        plan = json.loads((_folder(cwd) / "plan.json").read_text())
    except (OSError, ValueError, StopIteration):
        return None
    for step_id, step in plan["steps"].items():
        running = step["state"] == "running" and step_id.startswith("run/")
        if running and step["claim"]["pid"] != other_than and (
                _folder(cwd) / step_id.removeprefix("run/") / "checkpoints").is_dir():
            return step["claim"]["pid"]
    return None


@SHARES_THE_REFERENCE
def test_a_killed_worker_and_a_killed_command_then_the_same_command_give_the_same_page(
        replicas, one_worker, tmp_path):
    command = _command(replicas, "cub", *PLAN, "--workers", "2")
    coordinator = subprocess.Popen(command, cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
    try:
        worker = _wait_for(lambda: _running_run(tmp_path), "a worker training a run")
        os.kill(worker, signal.SIGKILL)
        _wait_for(lambda: _running_run(tmp_path, other_than=worker), "another worker's run")
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait(timeout=60)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
    plan = json.loads((_folder(tmp_path) / "plan.json").read_text())
    assert any(step["state"] != "done" for step in plan["steps"].values())
    done = _study(tmp_path, command)
    assert "died: taken over" in done.stdout or "resuming" in (
        "".join(path.read_text() for path in (_folder(tmp_path) / "logs").glob("worker-*.log")))
    reference, again = _reports(one_worker), _reports(tmp_path)
    assert [name for name in reference if reference[name] != again.get(name)] == []


@SHARES_THE_REFERENCE
def test_two_commands_at_once_on_one_folder_train_each_run_once(replicas, one_worker, tmp_path):
    command = _command(replicas, "cub", *PLAN)
    first, second = (subprocess.Popen(command, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True) for _ in range(2))
    outputs = [process.communicate(timeout=600)[0] for process in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outputs
    starts = [line for output in outputs for line in output.splitlines() if "] training " in line]
    assert len(starts) == RUNS and not any("resuming" in output for output in outputs)
    assert all(output.count("] training ") for output in outputs), "both commands trained runs"
    plan = json.loads((_folder(tmp_path) / "plan.json").read_text())
    assert {step["state"] for step in plan["steps"].values()} == {"done"}
    assert all(step["attempts"] == 1 for step in plan["steps"].values())
    reference, together = _reports(one_worker), _reports(tmp_path)
    assert [name for name in reference if reference[name] != together.get(name)] == []


@pytest.mark.parametrize("dataset", ["cars", "sop"])
def test_the_study_of_a_cars_or_sop_replica_makes_its_masks_and_ends_with_the_page(
        replicas, dataset, tmp_path):
    root = replicas / dataset
    if not root.exists():
        # both sides of each of the paper's split boundaries (train 1-74, val 75-98, test 99-196), four
        # classes in each split: u2netp masks 24 images (the masks were most of this test's time)
        make_cars(root, per_class=2, class_ids=CARS_CLASS_IDS) if dataset == "cars" else make_sop(root)
    model = provide_u2netp(tmp_path / "home")
    done = _study(tmp_path / "work", _command(replicas, dataset, "--methods", "multi_similarity"),
                  U2NET_HOME=str(model.parent))
    tmp_path = tmp_path / "work"
    folder = _folder(tmp_path)
    assert (next(folder.glob("report*")) / "study.html").is_file()
    plan = json.loads((folder / "plan.json").read_text())
    assert [step for step in plan["steps"] if step.startswith("masks-")] == ["masks-1of1"]
    assert "[masks-1of1] done" in done.stdout or plan["steps"]["masks-1of1"]["state"] == "done"
