"""A method that trains each batch in several optimiser steps (``Method.steps_per_batch``) gets them all, one
after the other, on the same composited images: DCML's paired halves (the authors' SOP scheme) on the tiny
bench."""

from __future__ import annotations

import pytest

from bgbias.engine.checkpoint import load_checkpoint
from bgbias.engine.training import train
from bgbias.engine.training_loop import TrainingSession
from bgbias.methods.dcml.method import DCML
from tests.conftest import tiny_config

FAST = ("loss.env_passes=1", "loss.env_batch_size=8", "bgaugment.enabled=true")


@pytest.mark.slow
@pytest.mark.parametrize(("paired", "parts"), [(False, [0]), (True, [0, 1])])
def test_each_batch_gets_the_methods_optimiser_steps(tiny_bench, tmp_path, monkeypatch, paired, parts):
    seen, epochs = [], []
    real_loss, real_steps = DCML.loss, TrainingSession.train_steps

    def recording_loss(self, batch):
        seen.append((batch.part, batch.indices.tolist(), batch.images.sum().item()))
        return real_loss(self, batch)

    def recording_epoch(session):
        epochs.append(real_steps(session))
        return epochs[-1]

    monkeypatch.setattr(DCML, "loss", recording_loss)
    monkeypatch.setattr(TrainingSession, "train_steps", recording_epoch)
    config = tiny_config(tiny_bench, "dcml", *FAST, f"loss.paired_halves={str(paired).lower()}", epochs=1)
    result = train(config, run_dir=tmp_path / "run", progress=False, echo=False)

    batches = 2  # 16 training images, 8 per batch
    assert [part for part, _, _ in seen] == parts * batches
    # The steps of one batch see the same images, composited once.
    for k in range(batches):
        group = seen[k * len(parts):(k + 1) * len(parts)]
        assert all(entry[1:] == group[0][1:] for entry in group)
    state = load_checkpoint(result.run.last)["optimizer"]["state"]
    assert {int(s["step"]) for s in state.values()} == {len(parts) * batches}  # Adam's count of its steps
    ((_, images_seen),) = epochs
    assert images_seen == 16  # images, not steps
