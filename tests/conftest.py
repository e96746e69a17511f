"""A tiny bench with masks and a background pool, and a fast training configuration on it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from bgbias.data.registry import open_dataset
from bgbias.engine.config import resolve_config
from tests.calibration import calibrate_batchnorm
from tests.replicas import copy_ground_truth_masks, make_bench

# One torch thread per test process (unless OMP_NUM_THREADS says otherwise); pytest-xdist's workers use the
# other cores. The tests' tensors are tiny, so a thread pool only adds synchronisation, and when the cores are
# busy (xdist's other worker, anything else) every operation waits for a thread that is not running: on two
# busy cores `pytest -m "not slow"` took 6 min with torch's default of 2 threads, 48 s with one.
if "OMP_NUM_THREADS" not in os.environ:
    torch.set_num_threads(1)
THREADS = torch.get_num_threads()
# torch.compile's tests compile in the test's process rather than in a pool of compiler processes, one per
# core: on the 2-core machine the pool took longer to start than the tiny graphs take to compile (the compiled
# run's test 12 s against 5 s alone, over 39 s beside the other worker).
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

# The test modules' compiled, assertion-rewritten form is cached even where PYTHONDONTWRITEBYTECODE is set (as
# on the machines this project is checked on): compiling every module anew in each worker doubled collection.
sys.dont_write_bytecode = False


@pytest.hookimpl(trylast=True)  # after pytest's own ordering by fixtures
def pytest_collection_modifyitems(config, items):
    """A test marked ``cuda`` needs a CUDA device: skipped without one (``scripts/gpu_check.py`` runs them
    with ``-m cuda`` on a GPU machine).

    Under pytest-xdist the ``slow`` tests come first (in their order): its workers take tests in collection
    order as they free up, so a minutes-long test collected last would run alone at the end while the other
    worker idles; started first, the short tests fill in around them and the workers end together."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    if torch.cuda.is_available():
        return
    needs_cuda = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(needs_cuda)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    """Each test starts with the worker's thread count, whatever a fixture or an earlier test did: a fixture
    that imported rembg (which resets torch to the machine's cores) left two threads fighting the other
    worker for two cores, and every later test of that worker ran up to nine times slower."""
    if torch.get_num_threads() != THREADS:
        torch.set_num_threads(THREADS)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI=true, a skip of a test marked ``required_in_ci`` is a failure: ``scripts/setup.sh --tests``
    installs what it needs, so its skip means the set-up missed it, not that the machine cannot run it."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("CI") == "true" and item.get_closest_marker("required_in_ci"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"required in CI, but skipped: {reason} (scripts/setup.sh --tests installs it)"


@pytest.fixture(scope="session")
def tiny_bench(tmp_path_factory) -> Path:
    """A bench of 4 train, 2 val and 3 test classes (4 views each), its masks and two 6-image background
    pools (train/ and test/)."""
    base = tmp_path_factory.mktemp("tiny-bench")
    root = make_bench(base / "bench", train_classes=4, val_classes=2, test_classes=3, per_class=4)
    copy_ground_truth_masks(open_dataset("bench", root).items(), base / "masks")
    rng = np.random.default_rng(0)
    for pool_name in ("train", "test"):
        pool = base / "backgrounds" / pool_name
        pool.mkdir(parents=True)
        for i in range(6):
            pixels = rng.integers(0, 256, (40 + 4 * i, 56, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(pool / f"bg{i}.png")
    return base


@pytest.fixture(scope="session")
def tiny_run(tiny_bench, tmp_path_factory) -> Path:
    """A finished one-epoch triplet run on the tiny bench (read-only for tests: copy it to change it), its
    checkpoints' BatchNorm statistics calibrated (tests/calibration.py) so that its embeddings differ."""
    from bgbias.engine.checkpoint import load_checkpoint, save_checkpoint
    from bgbias.engine.trained import load_trained
    from bgbias.engine.training import train

    run = tmp_path_factory.mktemp("runs") / "run"
    train(tiny_config(tiny_bench, epochs=1), run_dir=run, progress=False, echo=False)
    for name in ("best", "last"):
        method = load_trained(run, checkpoint=name, device="cpu").method
        calibrate_batchnorm(method, side=64)
        path = run / "checkpoints" / f"{name}.pt"
        save_checkpoint(path, {**load_checkpoint(path), "model": method.state_dict()})
    return run


def tiny_config(base: Path, method: str = "triplet", *extra: str, epochs: int = 2):
    """The random-weight test backbone (tiny_cnn) on 32-px crops, batches of 4 classes × 2, no worker
    processes."""
    return resolve_config(
        method, "bench",
        options={"root": str(base / "bench"), "bgaugment.masks": str(base / "masks"),
                 "bgaugment.backgrounds": str(base / "backgrounds")},
        overrides=[
            "model.backbone=tiny_cnn", "model.pretrained=false", "model.embedding_dim=16",
            "data.batch_size=8", "data.m_per_class=2", "data.workers=0", "data.crop=32",
            f"schedule.epochs={epochs}", *extra,
        ],
    )


@pytest.fixture
def study_folder(tiny_bench, tmp_path, monkeypatch) -> Path:
    """The working folder laid out as ``bgbias study`` leaves it, for the docs' examples: ``data/bench``,
    ``masks/bench`` and ``backgrounds/`` of the tiny bench."""
    import shutil

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "bench").symlink_to(tiny_bench / "bench")
    shutil.copytree(tiny_bench / "masks", tmp_path / "masks" / "bench")
    shutil.copytree(tiny_bench / "backgrounds", tmp_path / "backgrounds")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BGBIAS_DATA", raising=False)
    return tmp_path
