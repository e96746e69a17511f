"""Mixed precision: bfloat16 on a CPU only where the CPU computes it natively, float16 only on CUDA."""

from __future__ import annotations

import math

import pytest
import torch

from bgbias.engine import device as device_module
from bgbias.engine.checkpoint import load_checkpoint
from bgbias.engine.device import cpu_has_native_bf16, resolve_amp
from bgbias.engine.training import train
from bgbias.errors import OptionError
from tests.conftest import tiny_config

CPU = torch.device("cpu")


def test_auto_and_off_leave_a_cpu_in_float32():
    assert resolve_amp("auto", CPU) is None and resolve_amp("off", CPU) is None


def test_bf16_runs_on_a_cpu_with_native_bfloat16(monkeypatch):
    monkeypatch.setattr(device_module, "cpu_has_native_bf16", lambda: True)
    assert resolve_amp("bf16", CPU) == torch.bfloat16


def test_bf16_on_a_cpu_without_it_says_what_it_needs(monkeypatch):
    monkeypatch.setattr(device_module, "cpu_has_native_bf16", lambda: False)
    with pytest.raises(OptionError, match="native bfloat16 arithmetic") as raised:
        resolve_amp("bf16", CPU)
    assert "amp=off" in raised.value.fix


def test_fp16_needs_cuda():
    with pytest.raises(OptionError, match="'fp16' needs a CUDA device"):
        resolve_amp("fp16", CPU)


@pytest.mark.skipif(not cpu_has_native_bf16(), reason="this CPU has no native bfloat16 arithmetic")
def test_a_bf16_training_on_the_cpu_trains_and_scores_in_float32(tiny_bench, tmp_path):
    result = train(tiny_config(tiny_bench, "triplet", "amp=bf16", epochs=1), runs=tmp_path, progress=False,
                   echo=False)
    assert result.status == "finished" and math.isfinite(result.history[1]["train_loss"])
    assert 0.0 <= result.history[1]["val_map_at_r"] <= 1.0
    weights = load_checkpoint(result.run.best)["model"]
    assert all(tensor.dtype != torch.bfloat16 for tensor in weights.values())
