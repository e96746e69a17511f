"""``bgbias study`` on the tiny CUB and SOP replicas, from the command line: it ends with the page; a worker
of two and then the whole command killed mid-run, then the same command again and the one-worker command at
the same time on the same folder, write the same bytes as one worker.

Each study is as small as its check allows: one method, DCML (its environment weights draw randomness of their
own; one pass of them, the authors' code's setting), one seed, so two runs, one per worker; two epochs of
three batches (a checkpoint to resume from, a second epoch to kill a worker in); two explained images. The
reference study with one worker is made once (a module fixture) and read by every test that compares bytes.
multi_similarity's study runs in the SOP test. The Cars196 layout's reader is tested in
tests/data/test_cars.py and tests/data/test_splits.py; past its reader, a study takes SOP's path."""

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

from bgbias.data.items import mask_path
from bgbias.data.registry import open_dataset
from tests.replicas import copy_ground_truth_masks, make_cub, make_sop
from tests.u2netp import provide_u2netp

pytestmark = pytest.mark.slow
SHARES_THE_REFERENCE = pytest.mark.xdist_group("study-end-to-end")
"""One xdist worker takes the tests that compare with the reference study, so that it is made once."""

TINY = ("model.backbone=tiny_cnn", "model.pretrained=false", "model.embedding_dim=16", "data.batch_size=8",
        "data.m_per_class=2", "data.workers=0", "data.crop=32", "schedule.epochs=2",
        "data.batches_per_epoch=3", "schedule.validate_untrained=false")
PLAN = ("--methods", "dcml", "--seeds", "1", "--set", "loss.env_passes=1")
RUNS = 2
"""The plan's runs: DCML without and with BGAugment."""
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
    segmentations as masks) and two pools."""
    base = tmp_path_factory.mktemp("replicas")
    cub = make_cub(base / "cub", n_classes=112, per_class=2)
    copy_ground_truth_masks(open_dataset("cub", cub).items(), base / "cub-masks")
    _pools(base / "pools")
    return base


def _command(replicas: Path, dataset: str = "cub", *extra: str, tiny: tuple[str, ...] = TINY) -> list[str]:
    masks = ["--masks", str(replicas / "cub-masks")] if dataset == "cub" else ["--masks", "u2netp"]
    settings = [part for setting in tiny for part in ("--set", setting)]
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
def test_the_study_of_a_cub_replica_ends_with_the_page(one_worker):
    folder = _folder(one_worker)
    (page,) = folder.glob("report*/study.html")
    assert "dcml + BGAugment" in (page.parent / "study.md").read_text()
    plan = json.loads((folder / "plan.json").read_text())
    assert {step["state"] for step in plan["steps"].values()} == {"done"} and len(plan["steps"]) == RUNS + 2


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
def test_a_killed_worker_and_a_killed_command_then_two_commands_at_once_write_the_bytes_of_one_worker(
        replicas, one_worker, tmp_path):
    """Two workers, one killed while it trains, then the command itself; the study with one worker (in the
    command's own process), twice at the same time on the same folder, ends it: both succeed, every claim
    is given back, and the page and every run's reports are one worker's bytes. (That two commands at once
    each take other steps and do each once is tests/test_concurrency.py's check, with stand-ins of the
    steps' work: one study of real training here serves both cases.)"""
    one = _command(replicas, "cub", *PLAN)
    command = [*one, "--workers", "2"]
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
    again, beside = (subprocess.Popen(one, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True) for _ in range(2))
    outputs = [process.communicate(timeout=600)[0] for process in (again, beside)]
    assert [again.returncode, beside.returncode] == [0, 0], [output[-3000:] for output in outputs]
    logs = "".join(path.read_text() for path in (_folder(tmp_path) / "logs").glob("worker-*.log"))
    assert "died: taken over" in "".join(outputs) or "resuming" in "".join(outputs) + logs
    steps = json.loads((_folder(tmp_path) / "plan.json").read_text())["steps"].values()
    assert {(step["state"], step["claim"]) for step in steps} == {("done", None)}
    reference, together = _reports(one_worker), _reports(tmp_path)
    assert len(reference) > 4 * RUNS and reference.keys() == together.keys()  # every run's reports, the page
    assert [name for name in reference if reference[name] != together[name]] == []


def test_the_study_of_a_sop_replica_makes_its_masks_and_ends_with_the_page(replicas, tmp_path):
    make_sop(replicas / "sop")  # both sides of the train/val boundary at class 8489: 22 images to mask
    model = provide_u2netp(tmp_path / "home")
    one_epoch = tuple("schedule.epochs=1" if setting.startswith("schedule.epochs=") else setting
                      for setting in TINY)  # nothing to resume here
    command = _command(replicas, "sop", "--methods", "multi_similarity", tiny=one_epoch)
    done = _study(tmp_path / "work", command, U2NET_HOME=str(model.parent))
    folder = _folder(tmp_path / "work")
    assert (next(folder.glob("report*")) / "study.html").is_file()
    plan = json.loads((folder / "plan.json").read_text())
    assert [step for step in plan["steps"] if step.startswith("masks-")] == ["masks-1of1"]
    assert "[masks-1of1] done" in done.stdout or plan["steps"]["masks-1of1"]["state"] == "done"


def test_a_study_with_a_second_mask_source_reports_each_run_s_mask_sensitivity(replicas, tmp_path):
    """One method, one seed, the CUB replica's segmentations (a box in the middle) against the images' left
    halves: each run's report has the reading, and the page its table."""
    boxes = tmp_path / "boxes"
    for item in open_dataset("cub", replicas / "cub").items():
        with Image.open(item.image) as image:
            width, height = image.size
        mask = Image.new("L", (width, height), 0)
        mask.paste(255, (0, 0, width // 2, height))
        mask_path(item, boxes).parent.mkdir(parents=True, exist_ok=True)
        mask.save(mask_path(item, boxes))
    cwd = tmp_path / "study"
    _study(cwd, _command(replicas, "cub", "--methods", "multi_similarity", "--seeds", "1", "--compare-masks",
                         str(boxes)))
    folder = _folder(cwd)
    reports = sorted(folder.glob("multi_similarity*/eval/*-test/report.json"))
    assert len(reports) == RUNS
    for path in reports:
        sensitivity = json.loads(path.read_text())["mask_sensitivity"]
        assert sensitivity["second"]["masks"] == str(boxes)
        assert 0 < sensitivity["agreement"]["mean"] < 1
    (page,) = folder.glob("report*/study.md")
    assert "How much do the masks decide" in page.read_text()
    assert json.loads((folder / "plan.json").read_text())["spec"]["compare_masks"] == "folder"
