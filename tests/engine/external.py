"""Models from outside bgbias for tests: a trained run exported to TorchScript and ONNX, and small factories
(``tests.engine.external:<name>``) that return modules of every kind a user may bring."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import nn

from bgbias.engine.trained import load_trained

SIDE = 128
"""The bench's evaluation crop: the exports' example input."""


class Embed(nn.Module):
    """A bgbias method's ``embed`` as a module: float RGB in [0, 1] in (its convention applied inside)."""

    def __init__(self, method: nn.Module):
        super().__init__()
        self.method = method

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.method.embed(images)


def exported_run(run: Path) -> Embed:
    return Embed(load_trained(run, device="cpu").method).eval()


def export_torchscript(run: Path, path: Path) -> Path:
    with torch.no_grad():
        torch.jit.save(torch.jit.trace(exported_run(run), torch.rand(2, 3, SIDE, SIDE)), str(path))
    return path


def export_onnx(module: nn.Module, path: Path, side: int = SIDE, dynamic_batch: bool = True) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript-based exporter says it is deprecated
        torch.onnx.export(module, (torch.rand(2, 3, side, side),), str(path), dynamo=False,
                          input_names=["images"], output_names=["embedding"],
                          dynamic_axes={"images": {0: "batch"}} if dynamic_batch else None)
    return path


def tiny_embedder(dim: int = 8) -> nn.Module:
    """A small random-weight CNN, the same weights on every call: images → (B, dim)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, stride=2), nn.ReLU(), nn.Conv2d(8, 16, 3, stride=2), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, dim))


class Named(nn.Module):
    """``tiny_embedder`` whose output is a dict ``{"embedding": …, "logits": …}``."""

    def __init__(self):
        super().__init__()
        self.body = tiny_embedder()

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        embedding = self.body(images)
        return {"embedding": embedding, "logits": embedding[:, :2]}


def named_outputs() -> nn.Module:
    return Named()


def feature_maps() -> nn.Module:
    """Forgets to pool: (B, C, h, w) out."""
    return nn.Conv2d(3, 4, 3)


def diverged() -> nn.Module:
    model = tiny_embedder()
    with torch.no_grad():
        model[-1].bias.fill_(float("nan"))
    return model


def not_a_module() -> int:
    return 3


class _Misbehaving(nn.Module):
    """``tiny_embedder`` whose output ``mistake`` spoils (see the factories below)."""

    def __init__(self, mistake: str):
        super().__init__()
        self.body = tiny_embedder()
        self.mistake = mistake
        self.calls = 0

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.mistake == "raises":
            raise ValueError("this model is broken")
        embedding = self.body(images)
        if self.mistake == "complex":
            return torch.complex(embedding, embedding)
        if self.mistake == "integer":
            return embedding.round().long()
        if self.mistake == "zero width":
            return embedding[:, :0]
        if self.mistake == "one axis":
            return embedding.sum(dim=1)
        if self.mistake == "detached":
            return embedding.detach()
        if self.mistake == "width changes":
            return embedding if self.calls == 1 else embedding[:, :5]
        return embedding


def wrong_input_size() -> nn.Module:
    """Built for 8 × 8 px input: any other size fails in its linear layer."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 4))


def misbehaving(mistake: str) -> nn.Module:
    return _Misbehaving(mistake)
