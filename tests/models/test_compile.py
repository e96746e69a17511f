"""``model.compile``: every backbone stage through torch.compile, the same numbers as eager, checkpoints
unchanged, and a compiler that fails never fails the run."""

from __future__ import annotations

import math

import pytest
import torch

from bgbias.engine.checkpoint import load_checkpoint
from bgbias.engine.trained import load_trained
from bgbias.engine.training import train
from bgbias.models.registry import build_backbone
from tests.conftest import tiny_config


def _backbone():
    torch.manual_seed(0)
    return build_backbone("tiny_cnn", pretrained=False).eval()


def test_a_failing_compiler_warns_once_and_the_stage_runs_eagerly(monkeypatch):
    class CompilerFailed(torch._dynamo.exc.TorchDynamoException):
        """What torch.compile raises when its backend fails (BackendCompilerFailed's base)."""

    def broken_compile(block):
        def call(_):
            raise CompilerFailed("no C++ compiler")
        return call

    backbone = _backbone()
    images = torch.rand(2, 3, 32, 32)
    with torch.inference_mode():
        eager = backbone(images)[backbone.final]
    monkeypatch.setattr(torch, "compile", broken_compile)
    backbone.compile_stages(True)
    with pytest.warns(UserWarning, match="torch.compile failed on backbone stage") as caught, \
            torch.inference_mode():
        fallen_back = backbone(images)[backbone.final]
    assert len(caught) == 1 and backbone.compiled == {}
    assert torch.equal(fallen_back, eager)


def test_an_error_of_the_model_itself_is_not_swallowed(monkeypatch):
    def failing_model(block):
        def call(_):
            raise RuntimeError("out of memory")
        return call

    monkeypatch.setattr(torch, "compile", failing_model)
    backbone = _backbone()
    backbone.compile_stages(True)
    with pytest.raises(RuntimeError, match="out of memory"):
        backbone(torch.rand(2, 3, 32, 32))
    assert backbone.compiled.keys() == backbone.blocks.keys()


@pytest.mark.slow
def test_compiling_keeps_the_state_dict_of_the_blocks():
    backbone = _backbone()
    keys = list(backbone.state_dict())
    backbone.compile_stages(True)
    assert list(backbone.state_dict()) == keys and backbone.compiled.keys() == backbone.blocks.keys()
    backbone.compile_stages(False)
    assert backbone.compiled == {}


@pytest.mark.slow
def test_a_compiled_run_trains_and_its_checkpoint_loads_compiled(tiny_bench, tmp_path):
    config = tiny_config(tiny_bench, "triplet", "model.compile=true", "amp=off", epochs=1)
    result = train(config, runs=tmp_path, progress=False, echo=False)
    assert result.status == "finished" and math.isfinite(result.history[1]["train_loss"])
    assert not any(key.startswith("_orig_mod") or "compiled" in key
                   for key in load_checkpoint(result.run.best)["model"])
    trained = load_trained(result.run.root, device="cpu")
    assert trained.method.backbone.compiled.keys() == trained.method.backbone.blocks.keys()
    images = torch.rand(2, 3, 32, 32)
    with torch.inference_mode():
        compiled = trained.method.embed(images)
        trained.method.backbone.compile_stages(False)
        eager = trained.method.embed(images)
    assert torch.allclose(compiled, eager, atol=1e-4)
