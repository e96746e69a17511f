"""Mixed precision covers the networks alone: a backbone's convolutions run in bfloat16, and what a method
computes from their outputs (head, miner, loss) runs in float32."""

from __future__ import annotations

import pytest
import torch

from bgbias.methods.base import Batch, MethodSpec
from bgbias.methods.registry import method_class
from bgbias.models.precision import network_precision
from bgbias.models.registry import build_backbone


def _method(name: str = "multi_similarity"):
    torch.manual_seed(0)
    backbone = build_backbone("tiny_cnn", pretrained=False)
    spec = MethodSpec(embedding_dim=16, num_classes=4, num_samples=8, input_size=32)
    return method_class(name)(backbone, spec).train()


def _batch() -> Batch:
    return Batch(torch.rand(8, 3, 32, 32), torch.arange(4).repeat_interleave(2), torch.arange(8))


def _dtypes_seen(module: torch.nn.Module, kind: type) -> list[torch.dtype]:
    seen: list[torch.dtype] = []
    for layer in module.modules():
        if isinstance(layer, kind):
            layer.register_forward_hook(lambda _, __, output: seen.append(output.dtype))
    return seen


@pytest.mark.parametrize("dtype", [torch.bfloat16, None])
def test_the_backbone_computes_in_the_precision_and_hands_on_float32(dtype):
    method = _method()
    convolutions = _dtypes_seen(method.backbone, torch.nn.Conv2d)
    with network_precision(dtype):
        embeddings = method.embed(_batch().images)
    assert convolutions and set(convolutions) == {dtype or torch.float32}
    assert embeddings.dtype == torch.float32


def test_heads_and_losses_run_in_float32_under_bf16(monkeypatch):
    method = _method()
    heads = _dtypes_seen(method.head, torch.nn.Linear)
    seen = {}
    real_loss = method.loss_fn.forward

    def recording_loss(embeddings, labels, *rest):
        seen["similarities"] = (embeddings @ embeddings.T).dtype  # what the loss's own matmuls give
        return real_loss(embeddings, labels, *rest)

    monkeypatch.setattr(method.loss_fn, "forward", recording_loss)
    with network_precision(torch.bfloat16):
        loss = method.loss(_batch())["loss"]
    loss.backward()
    assert heads and set(heads) == {torch.float32}
    assert seen["similarities"] == torch.float32 and loss.dtype == torch.float32


def test_precision_is_a_context_that_ends_with_it():
    method = _method()
    convolutions = _dtypes_seen(method.backbone, torch.nn.Conv2d)
    with network_precision(torch.bfloat16):
        pass
    method.embed(_batch().images)
    assert set(convolutions) == {torch.float32}
