"""The training loop end to end on a tiny bench: run folder, selection, BGAugment, resume, errors."""

from __future__ import annotations

import json

import pytest
import torch

from bgbias.engine import training_build, training_loop
from bgbias.engine.checkpoint import load_checkpoint
from bgbias.engine.config import load_run_config
from bgbias.engine.run_dir import latest_run
from bgbias.engine.training import resume_training, train
from bgbias.engine.training_loop import TrainingSession
from bgbias.errors import AssetError, DatasetError, ImageError, OptionError
from tests.conftest import tiny_config

TIMING = ("train_seconds", "train_images_per_second", "epoch_start_seconds")
DRAWS_CURVES = {"test_a_run_writes_its_folder"}
"""The test here that needs the real ``curves.png`` (tests/engine/test_curves.py checks the drawing)."""


@pytest.fixture(autouse=True)
def _curves_unplotted(request, monkeypatch):
    """``curves.png`` is redrawn after every epoch, and matplotlib's layout took ~90 % of these tiny runs'
    time: outside :data:`DRAWS_CURVES` the runs here skip it (it feeds nothing back into training)."""
    if request.function.__name__ not in DRAWS_CURVES:
        monkeypatch.setattr(training_loop, "plot_training_curves", lambda *args, **kwargs: None)


def without_timing(history):
    return [{k: v for k, v in row.items() if k not in TIMING} for row in history]


@pytest.mark.slow
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
    assert run.curves.read_bytes().startswith(b"\x89PNG")
    best = load_checkpoint(run.best)
    assert best["epoch"] == result.best_epoch and best["value"] == result.best_value
    assert result.best_value == max(row["val_map_at_r"] for row in result.history[1:])
    assert "train.log" in {p.name for p in run.root.iterdir()}


RESUMED = {
    "multi_similarity": ("loss.miner_epsilon=null",),
    # Environments learned before epochs 1 and 3, from keyed BGAugment batches: the resumed run must
    # re-learn epoch 3's exactly.
    "dcml": ("loss.env_update_every=2", "loss.env_passes=2", "loss.env_batch_size=8",
             "bgaugment.enabled=true"),
    # Tuples drawn per batch from its image indices: the resumed epoch must draw the same ones.
    "sam": ("bgaugment.enabled=true",),
    # Edge buffers moved by every training forward; the backbone held for two epochs of warm-up, the third
    # (after the kill) steps it, so the resumed run must know the warm-up is over and keep the edges.
    "avsl": ("optim.warmup_epochs=2",),
}


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(RESUMED))
def test_resume_after_a_kill_equals_an_uninterrupted_run(tiny_bench, tmp_path, monkeypatch, method):
    config = tiny_config(tiny_bench, method, *RESUMED[method], epochs=3)
    whole = train(config, run_dir=tmp_path / "whole", progress=False, echo=False)

    real_steps = TrainingSession.train_steps

    def killed_in_epoch_3(session):
        if session.state.epoch == 3:
            raise KeyboardInterrupt
        return real_steps(session)

    monkeypatch.setattr(TrainingSession, "train_steps", killed_in_epoch_3)
    with pytest.raises(KeyboardInterrupt):
        train(config, run_dir=tmp_path / "killed", progress=False, echo=False)
    assert load_checkpoint(tmp_path / "killed" / "checkpoints" / "last.pt")["epoch"] == 2
    assert json.loads((tmp_path / "killed" / "run.json").read_text())["status"] == "interrupted"
    monkeypatch.setattr(TrainingSession, "train_steps", real_steps)
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


@pytest.mark.slow
def test_a_watched_test_split_is_scored_but_never_selects(tiny_bench, tmp_path):
    from bgbias.engine.trained import load_trained
    from bgbias.measurement.request import MeasureRequest
    from bgbias.report.evaluate import evaluate

    settings = ("bgaugment.enabled=true", "schedule.validate_untrained=false")
    plain = train(tiny_config(tiny_bench, "triplet", *settings, epochs=1), run_dir=tmp_path / "plain",
                  progress=False, echo=False)
    config = tiny_config(tiny_bench, "triplet", *settings, "schedule.watch_test=true", epochs=1)
    watched = train(config, run_dir=tmp_path / "watched", progress=False, echo=False)
    (row,) = watched.history
    assert {key: value for key, value in row.items() if not key.startswith(("test_", "train_"))} == {
        key: value for key, value in plain.history[0].items() if not key.startswith("train_")}
    # The watched columns are what ``bgbias eval`` reports for the selected (here: the last) epoch.
    request = MeasureRequest(corrupted=True, repeats=1, backgrounds=tiny_bench / "backgrounds",
                             masks=tiny_bench / "masks", workers=0,
                             progress=False, manifests=tmp_path / "manifests")
    result = evaluate(load_trained(watched.run.root), request, log=lambda _: None)
    assert row["test_map_at_r"] == pytest.approx(result.clean.map_at_r, abs=1e-6)
    assert row["test_corrupted_map_at_r"] == pytest.approx(result.corrupted[0].map_at_r, abs=1e-6)
    assert "watched test" in watched.run.log.read_text()


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


@pytest.mark.parametrize(
    ("settings", "error", "words"),
    [
        (("model.pretrained=true", "model.weights=/nonexistent/w.pth"), AssetError, "weight file not found"),
        (("data.batch_size=16",), OptionError, "needs 8 classes"),  # the tiny bench trains on 4
    ],
)
def test_what_cannot_be_built_stops_before_the_run_folder(tiny_bench, tmp_path, settings, error, words):
    config = tiny_config(tiny_bench, "triplet", *settings)
    with pytest.raises(error) as err:
        train(config, run_dir=tmp_path / "run", progress=False, echo=False)
    assert words in err.value.render()
    assert not (tmp_path / "run").exists()


def test_proxy_method_trains_its_proxies(tiny_bench, tmp_path):
    config = tiny_config(tiny_bench, "proxy_anchor", "optim.lr_loss=0.1", epochs=1)
    result = train(config, run_dir=tmp_path / "pa", progress=False, echo=False)
    state = load_checkpoint(result.run.last)
    names = [g["name"] for g in state["optimizer"]["param_groups"]]
    assert names == ["backbone", "head", "loss"]
    assert state["optimizer"]["param_groups"][2]["lr"] == 0.1


def test_warm_up_epochs_hold_the_backbone_and_train_the_rest(tiny_bench, tmp_path, monkeypatch):
    """During ``optim.warmup_epochs`` the backbone group neither moves nor gathers optimiser state; the head
    trains; after it the backbone trains too."""
    after: list[dict[str, torch.Tensor]] = []
    real_epoch = TrainingSession.epoch

    def recording(session):
        if not after:
            after.append({k: v.clone() for k, v in session.method.state_dict().items()})
        real_epoch(session)
        after.append({k: v.clone() for k, v in session.method.state_dict().items()})

    monkeypatch.setattr(TrainingSession, "epoch", recording)
    config = tiny_config(tiny_bench, "triplet", "optim.warmup_epochs=1", epochs=2)
    result = train(config, run_dir=tmp_path / "warm", progress=False, echo=False)
    start, first, second = after

    def moved(a, b, prefix):
        return any(not torch.equal(a[k], b[k]) for k in a if k.startswith(prefix))

    assert not moved(start, first, "backbone.") and moved(start, first, "head.")
    assert moved(first, second, "backbone.")
    state = load_checkpoint(result.run.last)["optimizer"]
    backbone_ids = state["param_groups"][0]["params"]
    assert state["param_groups"][0]["name"] == "backbone"
    assert all(i in state["state"] for i in backbone_ids)  # stepped in epoch 2

    one = tiny_config(tiny_bench, "triplet", "optim.warmup_epochs=1", epochs=1)
    held = load_checkpoint(train(one, run_dir=tmp_path / "held", progress=False, echo=False).run.last)
    held_ids = held["optimizer"]["param_groups"][0]["params"]
    assert not any(i in held["optimizer"]["state"] for i in held_ids)  # no moments gathered while held


def test_gradients_are_clipped_per_group_and_on_the_first_step_alone_where_configured(tiny_bench, tmp_path,
                                                                                      monkeypatch):
    """``optim.grad_clip_per_group`` clips each parameter group's norm on its own, and
    ``grad_clip_first_step_only`` the run's first optimiser step alone (AVSL's code); by default every step
    clips all parameters together."""
    calls: list[tuple[int, float]] = []
    real = torch.nn.utils.clip_grad_norm_

    def recording(parameters, max_norm, *args, **kwargs):
        parameters = list(parameters)
        calls.append((len(parameters), max_norm))
        return real(parameters, max_norm, *args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", recording)
    authors = ["optim.grad_clip=0.5", "optim.grad_clip_per_group=true",
               "optim.grad_clip_first_step_only=true"]
    result = train(tiny_config(tiny_bench, "triplet", *authors, epochs=2), run_dir=tmp_path / "first",
                   progress=False, echo=False)
    groups = load_checkpoint(result.run.last)["optimizer"]["param_groups"]
    assert len(groups) == 2 and calls == [(len(group["params"]), 0.5) for group in groups]
    calls.clear()
    train(tiny_config(tiny_bench, "triplet", "optim.grad_clip=0.5", epochs=1), run_dir=tmp_path / "every",
          progress=False, echo=False)
    assert len(calls) > 1 and set(calls) == {(sum(len(group["params"]) for group in groups), 0.5)}


def test_a_dcml_run_records_its_environment_learning(tiny_bench, tmp_path):
    config = tiny_config(tiny_bench, "dcml", "loss.env_update_every=2", "loss.env_passes=1",
                         "loss.env_batch_size=8", epochs=2)
    result = train(config, run_dir=tmp_path / "dcml", progress=False, echo=False)
    assert load_run_config(result.run.config).loss["env_passes"] == 1  # which learner ran, in the config
    first, second = result.history[1], result.history[2]
    assert first["env_passes"] == 1 and first["epoch_start_seconds"] > 0
    assert "env_passes" not in second  # next update before epoch 3
    for name in ("env_ce", "irm_penalty", "attention_spread", "compactness", "erm"):
        assert f"train_{name}" in first
    logits = load_checkpoint(result.run.best)["model"]["env_logits"]
    assert logits.shape == (16, 2) and logits.abs().sum() > 0


def test_a_run_says_what_comes_before_its_first_epoch_and_what_its_epochs_will_take(tiny_bench, tmp_path):
    config = tiny_config(tiny_bench, "dcml", "loss.env_passes=2", "loss.env_batch_size=8", epochs=3)
    log = train(config, run_dir=tmp_path / "dcml", progress=False, echo=False).run.log.read_text()
    passes = [log.index(f"epoch 1, before its steps: learning DCML's environment weights, pass {number}/2 "
                        f"over the 16 training images") for number in (1, 2)]
    estimate = log.index("estimate: about ")
    assert passes[0] < passes[1] < estimate < log.index("epoch 1, loss")
    assert "of its 2 batches took" in log[estimate:] and "for the 3 epochs left" in log[estimate:]
    lines = [line for line in log.splitlines() if ", loss " in line]
    assert [line.split("; ")[-1].split(" left")[1] for line in lines[:2]] == [" for 2 more epochs",
                                                                             " for 1 more epochs"]
    assert "left" not in lines[2]


def test_training_data_passes_are_keyed_and_cover_the_split(tiny_bench):
    from bgbias.data.registry import open_dataset
    from bgbias.data.splits import split_items
    from bgbias.engine.training_data import TrainingPasses, train_images

    config = tiny_config(tiny_bench, "dcml", "bgaugment.enabled=true")
    dataset = open_dataset("bench", tiny_bench / "bench")
    items = split_items(dataset, "train")
    masks = training_build._check_masks(config, dataset, items, [], [], tiny_bench / "masks")
    data = TrainingPasses(config, train_images(config, dataset, items, masks),
                        training_build._bgaugment(config, torch.device("cpu")), torch.device("cpu"))

    def one_pass(**key):
        return list(data.batches(batch_size=8, **key))

    a, b = one_pass(stream=1, epoch=2, pass_index=0), one_pass(stream=1, epoch=2, pass_index=0)
    assert all(torch.equal(x.images, y.images) and torch.equal(x.indices, y.indices)
               for x, y in zip(a, b, strict=True))
    assert set(torch.cat([x.indices for x in a]).tolist()) == set(range(len(items)))
    assert all(x.images.dtype == torch.float32 and x.images.max() <= 1 for x in a)
    other = one_pass(stream=1, epoch=2, pass_index=1)
    assert not all(torch.equal(x.images, y.images) for x, y in zip(a, other, strict=True))
    g1, g2 = data.generator(stream=1, epoch=2), data.generator(stream=1, epoch=3)
    assert torch.rand(3, generator=g1).tolist() != torch.rand(3, generator=g2).tolist()


def test_corrupted_validation_without_its_pool_stops_before_the_run_folder(tiny_bench, tmp_path):
    """Selecting on corrupted validation needs the train pool even without BGAugment."""
    config = tiny_config(tiny_bench, "triplet", "schedule.monitor=corrupted",
                         f"bgaugment.backgrounds={tmp_path / 'no-pools'}", epochs=1)
    with pytest.raises(DatasetError, match="background pool folder not found"):
        train(config, run_dir=tmp_path / "run", progress=False, echo=False)
    assert not (tmp_path / "run").exists()
