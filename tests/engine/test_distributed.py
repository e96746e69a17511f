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

# In each torchrun worker: ``bgbias train`` of each method in turn, each in a folder of its own (the command
# joins the process group and leaves it), writing per method and rank the gloo threads it had just before and
# just after leaving the group, and after the command returned (thread names from /proc). One launch for
# every method: starting torchrun and torch in two processes cost more than training.
TRAIN_EACH_METHOD = """
import json, os, sys
from pathlib import Path

import torch.distributed as td

from bgbias.cli import main


def gloo_threads():
    tasks = Path("/proc/self/task").iterdir()
    return sorted(name for name in ((task / "comm").read_text().strip() for task in tasks) if "gloo" in name)


out, arguments = Path(sys.argv[1]), json.loads(sys.argv[2])
seen = {}
destroy = td.destroy_process_group


def destroy_and_look(*args, **kwargs):
    seen["before_destroy"] = gloo_threads()
    destroy(*args, **kwargs)
    seen["after_destroy"] = gloo_threads()


td.destroy_process_group = destroy_and_look
for method, command in arguments.items():
    seen.clear()
    os.chdir(out / method)
    main(command, standalone_mode=False)
    seen["after_train"] = gloo_threads()
    (out / f"{method}-rank{os.environ['RANK']}.json").write_text(json.dumps(seen))
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads thread names from Linux's /proc")
def test_two_process_torchrun_trains_each_method_writes_one_checkpoint_and_ends_gloo_threads(
        tiny_bench, tmp_path):
    """Each method trains under two ranks into one run folder with one checkpoint.

    Each rank's gloo threads end when ``bgbias train`` leaves the group: a group still held after
    destroy_process_group (by the DistributedDataParallel wrapper, or by a torch module that bound
    group.WORLD when DDP imported it) is torn down in interpreter shutdown instead, racing gloo's threads:
    under load a rank aborted there ("terminate called without an active exception")."""
    arguments = {}
    for method, extra in EXTRA.items():
        (tmp_path / method).mkdir()
        arguments[method] = [
            "train", "--method", method, "--root", str(tiny_bench / "bench"), "--device", "cpu",
            "--workers", "0", "--epochs", "1", "--run-dir", "ddp", "--no-progress", "--backbone", "tiny_cnn",
            "--bgaugment",
            "--masks", str(tiny_bench / "masks"), "--backgrounds", str(tiny_bench / "backgrounds"),
            *(f"--set={s}" for s in ("model.pretrained=false", "model.embedding_dim=16", "data.batch_size=8",
                                     "data.m_per_class=2", "data.crop=32", *extra))]
    script = tmp_path / "train_each_method.py"
    script.write_text(TRAIN_EACH_METHOD)
    done = _torchrun(str(script), str(tmp_path), json.dumps(arguments), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    for method in EXTRA:
        run_dir = tmp_path / method / "ddp"
        assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["best.pt", "last.pt"], method
        # one run folder, no duplicates
        assert sorted(p.name for p in run_dir.parent.iterdir()) == ["ddp", "latest"], method
        state = load_checkpoint(run_dir / "checkpoints" / "last.pt")
        assert state["epoch"] == 1 and state["status"] == "finished"
        # Each rank trained on its own half of the batches: 16 train images, batches of 8 → 1 batch per rank.
        assert state["history"][1]["train_images_per_second"] > 0
        assert "val_corrupted_map_at_r" in state["history"][1]
        for rank in (0, 1):
            seen = json.loads((tmp_path / f"{method}-rank{rank}.json").read_text())
            assert seen["before_destroy"], "no gloo thread while in the group: the check would see nothing"
            assert seen["after_destroy"] == [] and seen["after_train"] == [], (method, rank, seen)


def _torchrun(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``torchrun --standalone --nproc_per_node 2 ARGS`` in ``cwd``, one torch thread per worker."""
    # The workers start in cwd: PYTHONPATH makes them import this checkout, not another installed copy.
    path = os.pathsep.join(filter(None, [str(CHECKOUT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
