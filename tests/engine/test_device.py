"""Mixed precision (bfloat16 on a CPU only where the CPU computes it natively, float16 only on CUDA) and the
memory layout of a model's weights and inputs."""

from __future__ import annotations

import json
import math

import pytest
import torch

from bgbias import hardware
from bgbias.engine import device as device_module
from bgbias.engine.checkpoint import load_checkpoint
from bgbias.engine.device import cpu_has_native_bf16, loader_workers, resolve_amp, resolve_device
from bgbias.engine.trained import load_trained
from bgbias.engine.training import train
from bgbias.errors import OptionError
from bgbias.host_memory import keep_freed_memory
from tests.conftest import tiny_config

CPU = torch.device("cpu")


def test_off_leaves_a_cpu_in_float32():
    assert resolve_amp("off", CPU) is None


@pytest.mark.parametrize("native", [True, False])
def test_auto_leaves_any_cpu_in_float32(monkeypatch, native):
    monkeypatch.setattr(device_module, "cpu_has_native_bf16", lambda: native)
    assert resolve_amp("auto", CPU) is None


@pytest.mark.parametrize(("cores", "processes", "device", "workers"), [
    (2, "1", "cpu", 0), (4, "1", "cpu", 0), (8, "1", "cpu", 1), (64, "1", "cpu", 8), (16, "2", "cpu", 1),
    (2, "1", "cuda", 1), (16, "1", "cuda", 8), (16, "4", "cuda", 3), (1, "1", "cuda", 1),
])
def test_auto_loader_workers_follow_the_cores_each_process_has(monkeypatch, cores, processes, device,
                                                               workers):
    monkeypatch.setattr(hardware, "usable_cores", lambda: cores)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", processes)
    assert loader_workers("auto", torch.device(device)) == workers
    assert loader_workers(None, torch.device(device)) == workers
    assert loader_workers(3, torch.device(device)) == 3


@pytest.mark.slow
def test_a_run_records_how_it_used_the_machine(tiny_bench, tmp_path):
    result = train(tiny_config(tiny_bench, "triplet", "amp=off", "model.memory_format=contiguous", epochs=1),
                   runs=tmp_path, progress=False, echo=False)
    compute = json.loads(result.run.record.read_text())["compute"]
    assert compute == {"precision": "float32", "memory_format": "contiguous", "compile": False,
                       "loader_workers": 0, "cpu_threads": torch.get_num_threads(),
                       "host_memory": keep_freed_memory()}


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


@pytest.mark.slow
def test_a_channels_last_run_trains_and_is_rebuilt_channels_last(tiny_bench, tmp_path):
    config = tiny_config(tiny_bench, "triplet", "model.memory_format=channels_last", epochs=1)
    result = train(config, runs=tmp_path, progress=False, echo=False)
    assert result.status == "finished" and math.isfinite(result.history[1]["train_loss"])
    trained = load_trained(result.run.root, device="cpu")
    convolutions = [p for p in trained.method.parameters() if p.dim() == 4]
    assert convolutions and all(p.is_contiguous(memory_format=torch.channels_last) for p in convolutions)
    assert trained.method.backbone.memory_format == torch.channels_last
    images = torch.rand(2, 3, 32, 32)
    with torch.inference_mode():
        embedded = trained.method.embed(images)
        trained.method.set_memory_format(torch.contiguous_format)
        assert torch.allclose(trained.method.embed(images), embedded, atol=1e-5)


def test_the_default_layout_is_channels_last(tiny_bench):
    assert tiny_config(tiny_bench).model.memory_format == "channels_last"


def test_a_cuda_device_this_machine_lacks_is_refused_before_any_work(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert str(resolve_device("cuda:1")) == "cuda:1"
    missing = r"'cuda:9' was asked for, but there is no cuda:9 \(this machine has 2 GPUs\)"
    with pytest.raises(OptionError, match=missing) as error:
        resolve_device("cuda:9")
    assert "one of cuda:0, cuda:1" in error.value.fix
