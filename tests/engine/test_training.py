"""The training loop end to end on a tiny bench: run folder, selection, BGAugment, resume, errors."""

from __future__ import annotations

import pytest
import torch

from bgbias.engine import training
from bgbias.engine.checkpoint import load_checkpoint
from bgbias.engine.config import load_run_config
from bgbias.engine.run_dir import latest_run
from bgbias.engine.training import resume_training, train
from bgbias.errors import ImageError
from tests.engine.conftest import tiny_config

TIMING = ("train_seconds", "train_images_per_second")


def without_timing(history):
    return [{k: v for k, v in row.items() if k not in TIMING} for row in history]


def test_a_run_writes_its_folder(tiny_bench, tmp_path):
    config = tiny_config(tiny_bench)
    result = train(config, runs=tmp_path / "runs", progress=False, echo=False)
    run = result.run
    assert result.status == "finished"
    assert [row["epoch"] for row in result.history] == [0, 1, 2]
    assert all(0.0 <= row["val_map_at_r"] <= 1.0 for row in result.history)
    assert result.history[1]["train_loss"] >= 0 and result.history[1]["train_images_per_second"] > 0
    assert load_run_config(run.config) == config
    assert latest_run(tmp_path / "runs").root == run.root
    assert len(run.metrics_jsonl.read_text().splitlines()) == 3
    assert run.metrics_csv.read_text().startswith("epoch,")
    best = load_checkpoint(run.best)
    assert best["epoch"] == result.best_epoch and best["value"] == result.best_value
    assert result.best_value == max(row["val_map_at_r"] for row in result.history[1:])
    assert "train.log" in {p.name for p in run.root.iterdir()}


def test_resume_after_a_kill_equals_an_uninterrupted_run(tiny_bench, tmp_path, monkeypatch):
    config = tiny_config(tiny_bench, "multi_similarity", "loss.miner_epsilon=null", epochs=3)
    whole = train(config, run_dir=tmp_path / "whole", progress=False, echo=False)

    real_epoch = training._train_epoch

    def killed_in_epoch_3(*args, **kwargs):
        if args[8] == 3:
            raise KeyboardInterrupt
        return real_epoch(*args, **kwargs)

    monkeypatch.setattr(training, "_train_epoch", killed_in_epoch_3)
    with pytest.raises(KeyboardInterrupt):
        train(config, run_dir=tmp_path / "killed", progress=False, echo=False)
    assert load_checkpoint(tmp_path / "killed" / "checkpoints" / "last.pt")["epoch"] == 2
    monkeypatch.setattr(training, "_train_epoch", real_epoch)
    resumed = resume_training(tmp_path / "killed", progress=False, echo=False)

    assert without_timing(resumed.history) == without_timing(whole.history)
    assert (resumed.best_epoch, resumed.best_value) == (whole.best_epoch, whole.best_value)
    a = load_checkpoint(whole.run.last)["model"]
    b = load_checkpoint(resumed.run.last)["model"]
    assert all(torch.equal(a[key], b[key]) for key in a)


def test_bgaugment_selects_on_corrupted_validation(tiny_bench, tmp_path):
    config = tiny_config(tiny_bench, "triplet", "bgaugment.enabled=true", epochs=1)
    result = train(config, run_dir=tmp_path / "bg", progress=False, echo=False)
    assert all("val_corrupted_map_at_r" in row for row in result.history)
    assert (result.run.corrupted_val / "repeat-0.json").is_file()
    assert load_checkpoint(result.run.best)["monitor"] == "val_corrupted_map_at_r"


def test_a_missing_mask_stops_before_training(tiny_bench, tmp_path):
    masks = tmp_path / "masks"
    import shutil

    shutil.copytree(tiny_bench / "masks", masks)
    victim = sorted(masks.rglob("*.png"))[0]
    victim.unlink()
    config = tiny_config(tiny_bench, "triplet", "bgaugment.enabled=true", f"bgaugment.masks={masks}")
    with pytest.raises(ImageError) as err:
        train(config, run_dir=tmp_path / "run", progress=False, echo=False)
    assert "bgbias masks --dataset bench" in err.value.render()
    assert not (tmp_path / "run").exists()


def test_proxy_method_trains_its_proxies(tiny_bench, tmp_path):
    config = tiny_config(tiny_bench, "proxy_anchor", "optim.lr_loss=0.1", epochs=1)
    result = train(config, run_dir=tmp_path / "pa", progress=False, echo=False)
    state = load_checkpoint(result.run.last)
    names = [g["name"] for g in state["optimizer"]["param_groups"]]
    assert names == ["backbone", "head", "loss"]
    assert state["optimizer"]["param_groups"][2]["lr"] == 0.1
