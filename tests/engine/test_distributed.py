"""Two CPU processes under torchrun (gloo): one run folder, one checkpoint, ranks in step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bgbias.engine.checkpoint import load_checkpoint

CHECKOUT = Path(__file__).resolve().parents[2]

# DCML adds a double backward (its IRM penalty) under DistributedDataParallel, and an environment update
# that every rank computes before the first epoch; SAM a double backward through the backbone (its maps).
# AVSL averages each batch's edge estimate over the ranks inside its forward.
EXTRA = {"triplet": (), "dcml": ("loss.env_batch_size=8", "loss.env_passes=1"), "sam": (), "avsl": ()}


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(EXTRA))
def test_two_process_torchrun_trains_and_writes_one_checkpoint(tiny_bench, tmp_path, method):
    run_dir = tmp_path / "ddp"
    done = _torchrun(
        "-m", "bgbias", "train", "--method", method, "--root", str(tiny_bench / "bench"),
        "--device", "cpu", "--workers", "0", "--epochs", "1", "--run-dir", str(run_dir), "--no-progress",
        "--backbone", "tiny_cnn",
        "--bgaugment", "--masks", str(tiny_bench / "masks"), "--backgrounds", str(tiny_bench / "backgrounds"),
        *(f"--set={s}" for s in ("model.pretrained=false", "model.embedding_dim=16", "data.batch_size=8",
                                 "data.m_per_class=2", "data.crop=32", *EXTRA[method])),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["best.pt", "last.pt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ddp", "latest"]  # one run folder, no duplicates
    state = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert state["epoch"] == 1 and state["status"] == "finished"
    # Each rank trained on its own half of the batches: 16 train images, batches of 8 → 1 batch per rank.
    assert state["history"][1]["train_images_per_second"] > 0
    assert "val_corrupted_map_at_r" in state["history"][1]


# Trains in a torchrun worker and writes, per rank, the gloo threads it had just before and just after
# leaving the process group, and after train() returned (thread names from /proc).
LEAVING_GROUP = """
import json, os, sys
from pathlib import Path

import torch.distributed as td

from bgbias.engine.training import train
from tests.conftest import tiny_config


def gloo_threads():
    tasks = Path("/proc/self/task").iterdir()
    return sorted(name for name in ((task / "comm").read_text().strip() for task in tasks) if "gloo" in name)


bench, run_dir, out = map(Path, sys.argv[1:])
seen = {}
destroy = td.destroy_process_group


def destroy_and_look(*args, **kwargs):
    seen["before_destroy"] = gloo_threads()
    destroy(*args, **kwargs)
    seen["after_destroy"] = gloo_threads()


td.destroy_process_group = destroy_and_look
train(tiny_config(bench, "triplet", "device=cpu", epochs=1), run_dir=run_dir, progress=False, echo=False)
seen["after_train"] = gloo_threads()
(out / f"rank{os.environ['RANK']}.json").write_text(json.dumps(seen))
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads thread names from Linux's /proc")
def test_leaving_the_process_group_ends_gloo_threads_on_every_rank(tiny_bench, tmp_path):
    """A group still held after destroy_process_group (by the DistributedDataParallel wrapper, or by a torch
    module that bound group.WORLD when DDP imported it) is torn down in interpreter shutdown instead, racing
    gloo's threads: under load a rank aborted there ("terminate called without an active exception")."""
    script = tmp_path / "leaving_group.py"
    script.write_text(LEAVING_GROUP)
    done = _torchrun(str(script), str(tiny_bench), str(tmp_path / "ddp"), str(tmp_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert seen["before_destroy"], "no gloo thread found while in the group: the check would see nothing"
        assert seen["after_destroy"] == [] and seen["after_train"] == [], (rank, seen)


def _torchrun(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``torchrun --standalone --nproc_per_node 2 ARGS`` in ``cwd``, one torch thread per worker."""
    # The workers start in cwd: PYTHONPATH makes them import this checkout, not another installed copy.
    path = os.pathsep.join(filter(None, [str(CHECKOUT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
