"""The finite-loss watch: the first NaN or infinite loss is remembered on the device and raised when read
(every few steps and at each epoch's end), naming its epoch and step; a diverging run stops before it saves
the epoch."""

from __future__ import annotations

import math

import pytest
import torch

from bgbias.engine.loss_watch import LossWatch, TrainingDiverged
from tests.conftest import tiny_config


def test_finite_losses_pass_every_read():
    watch = LossWatch(every=2)
    for step in range(7):
        watch.see(torch.tensor(1.0 / (step + 1)), epoch=1, step=step)
    watch.check()


def test_the_first_bad_step_is_raised_at_the_next_read_with_its_value():
    watch = LossWatch(every=5)
    for step, value in enumerate([0.5, 0.4, 0.3, math.inf, math.nan]):
        if step < 4:
            watch.see(torch.tensor(value), epoch=2, step=step)
            continue
        with pytest.raises(TrainingDiverged, match=r"the loss became inf at epoch 2, step 3") as raised:
            watch.see(torch.tensor(value), epoch=2, step=step)
    assert "optim.grad_clip" in raised.value.fix


def test_a_read_between_the_regular_ones_raises_at_once():
    watch = LossWatch(every=100)
    watch.see(torch.tensor(0.1), epoch=1, step=0)
    watch.see(torch.tensor(math.nan), epoch=1, step=1)
    with pytest.raises(TrainingDiverged, match="became nan at epoch 1, step 1"):
        watch.check()


def test_a_new_epoch_reads_the_last_one_first():
    watch = LossWatch(every=100)
    watch.see(torch.tensor(math.nan), epoch=1, step=4)
    with pytest.raises(TrainingDiverged, match="epoch 1, step 4"):
        watch.see(torch.tensor(0.2), epoch=2, step=0)


def test_every_must_be_positive():
    with pytest.raises(ValueError, match="at least 1"):
        LossWatch(every=0)


def test_a_diverging_run_stops_with_the_step_and_saves_nothing_of_that_epoch(tiny_bench, tmp_path,
                                                                             monkeypatch):
    from bgbias.engine.training import train
    from bgbias.methods.base import Method

    forward = Method.forward
    calls = []

    def nan_at_second_step(self, batch):
        terms = forward(self, batch)
        calls.append(1)
        if len(calls) == 2:
            terms = {**terms, "loss": terms["loss"] * math.nan}
        return terms

    monkeypatch.setattr(Method, "forward", nan_at_second_step)
    run = tmp_path / "run"
    with pytest.raises(TrainingDiverged, match=r"the loss became nan at epoch 1, step 1\b"):
        train(tiny_config(tiny_bench, epochs=1), run_dir=run, progress=False, echo=False)
    assert not (run / "checkpoints" / "last.pt").exists()
