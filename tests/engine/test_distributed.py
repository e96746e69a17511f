"""Two CPU processes under torchrun (gloo): one run folder, one checkpoint, ranks in step."""

from __future__ import annotations

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
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        "-m", "bgbias", "train", "--method", method, "--root", str(tiny_bench / "bench"),
        "--device", "cpu", "--workers", "0", "--epochs", "1", "--run-dir", str(run_dir), "--no-progress",
        "--backbone", "tiny_cnn",
        "--bgaugment", "--masks", str(tiny_bench / "masks"), "--backgrounds", str(tiny_bench / "backgrounds"),
        *(f"--set={s}" for s in ("model.pretrained=false", "model.embedding_dim=16", "data.batch_size=8",
                                 "data.m_per_class=2", "data.crop=32", *EXTRA[method])),
    ]
    # The workers start in tmp_path: PYTHONPATH makes them import this checkout, not another installed copy.
    path = os.pathsep.join(filter(None, [str(CHECKOUT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["best.pt", "last.pt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ddp", "latest"]  # one run folder, no duplicates
    state = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert state["epoch"] == 1 and state["status"] == "finished"
    # Each rank trained on its own half of the batches: 16 train images, batches of 8 → 1 batch per rank.
    assert state["history"][1]["train_images_per_second"] > 0
    assert "val_corrupted_map_at_r" in state["history"][1]
