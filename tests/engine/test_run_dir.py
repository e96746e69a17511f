"""Run folders, the latest-run pointer, metrics files and checkpoints."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from bgbias.engine.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from bgbias.engine.run_dir import (
    create_run_dir,
    latest_run,
    mark_latest,
    open_run_dir,
    run_name,
    write_metrics,
)
from bgbias.errors import OptionError


def test_run_names_never_collide(tmp_path):
    name = run_name("bench", "triplet", True, 3, when=0)
    assert name.startswith("bench-triplet-bgaugment-seed3-")
    first, second = create_run_dir(name, tmp_path), create_run_dir(name, tmp_path)
    assert first.root != second.root and second.root.name.endswith("-2")
    assert first.last.parent.is_dir()


def test_latest_pointer(tmp_path):
    with pytest.raises(OptionError, match="no training run"):
        latest_run(tmp_path)
    run = create_run_dir("a", tmp_path)
    run.config.write_text("{}")
    mark_latest(run)
    assert latest_run(tmp_path).root == run.root
    with pytest.raises(OptionError, match="not a run folder"):
        open_run_dir(tmp_path / "elsewhere")


def test_metrics_files_hold_every_row(tmp_path):
    run = create_run_dir("m", tmp_path)
    rows = [{"epoch": 0, "val_map_at_r": 0.25}, {"epoch": 1, "train_loss": 1.5, "val_map_at_r": 0.5}]
    write_metrics(run, rows)
    assert [json.loads(line) for line in run.metrics_jsonl.read_text().splitlines()] == rows
    with run.metrics_csv.open() as f:
        table = list(csv.DictReader(f))
    assert table[1] == {"epoch": "1", "val_map_at_r": "0.5", "train_loss": "1.5"}
    assert table[0]["train_loss"] == ""


def test_checkpoints_load_with_weights_only(tmp_path):
    path = tmp_path / "c.pt"
    save_checkpoint(path, {"model": {"w": torch.ones(2)}, "history": [{"epoch": 1, "x": 0.5}], "rng": None})
    state = load_checkpoint(path)
    assert torch.equal(state["model"]["w"], torch.ones(2)) and state["history"][0]["x"] == 0.5


def test_bad_checkpoints_are_refused(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "none.pt")
    damaged = tmp_path / "damaged.pt"
    damaged.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="cannot read"):
        load_checkpoint(damaged)
    foreign = tmp_path / "foreign.pt"
    torch.save({"state_dict": {}}, foreign)
    with pytest.raises(CheckpointError, match="known format"):
        load_checkpoint(foreign)


class _Evil:
    def __reduce__(self):
        return (print, ("executed",))


def test_pickled_code_is_not_run(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"format": 1, "payload": _Evil()}, path)
    with pytest.raises(CheckpointError):
        load_checkpoint(path)


def test_equal_states_save_to_equal_checkpoint_bytes(tmp_path):
    """Reports carry a checkpoint's sha256: the bytes may not depend on the temporary file's random name."""
    state = {"epoch": 1, "model": {"w": torch.arange(6.0).reshape(2, 3)}}
    save_checkpoint(tmp_path / "a.pt", state)
    save_checkpoint(tmp_path / "b" / "last.pt", state)
    assert (tmp_path / "a.pt").read_bytes() == (tmp_path / "b" / "last.pt").read_bytes()
    assert torch.equal(load_checkpoint(tmp_path / "a.pt")["model"]["w"], state["model"]["w"])
