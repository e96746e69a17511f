"""Small methods for attribution tests: a real random-weight baseline, and one whose embedding only sees a
known square of the image."""

from __future__ import annotations

import torch
from torch import nn

from bgbias.engine.config import resolve_config
from bgbias.methods.base import Batch, Method, MethodSpec
from bgbias.methods.registry import method_class
from bgbias.models.backbone import Backbone
from bgbias.models.input_convention import IMAGENET, InputConvention
from bgbias.models.registry import build_backbone
from tests.calibration import calibrate_batchnorm

REGION = (8, 16, 4, 12)
"""Rows 8–15 and columns 4–11: the only pixels ``RegionMethod`` looks at."""


def baseline(name: str = "contrastive", dim: int = 16) -> Method:
    """A random-weight baseline on the test backbone tiny_cnn (the same weights on every call), its BatchNorm
    statistics measured on random images, as pretrained weights would bring them (tests/calibration.py), so
    that different images get embeddings that differ by more than rounding noise."""
    torch.manual_seed(0)
    spec = MethodSpec(dim, 4, 8, options=resolve_config(name, "bench").loss)
    method = method_class(name)(build_backbone("tiny_cnn", pretrained=False), spec)
    return calibrate_batchnorm(method)


class RegionFeatures(nn.Module):
    """A small non-linear embedding of the pixels inside ``REGION`` only."""

    def __init__(self, dim: int = 8):
        super().__init__()
        top, bottom, left, right = REGION
        generator = torch.Generator().manual_seed(0)
        self.weight = nn.Parameter(torch.randn(dim, 3 * (bottom - top) * (right - left), generator=generator))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        top, bottom, left, right = REGION
        return torch.tanh(inputs[:, :, top:bottom, left:right].flatten(1) @ self.weight.T / 10)


class RegionMethod(Method):
    """``embed`` = RegionFeatures of the network input; Euclidean distance (the base class default)."""

    def __init__(self, convention: InputConvention = IMAGENET):
        blocks = [("first", nn.Identity()), ("second", nn.Identity()), ("region", RegionFeatures())]
        backbone = Backbone(
            blocks, channels={"first": 3, "second": 3, "region": 8}, levels=("first", "second", "region"),
            convention=convention,
        )
        super().__init__(backbone, MethodSpec(8, 2, 2))

    def loss(self, batch: Batch) -> dict[str, torch.Tensor]:
        return {"loss": self.embed(batch.images).sum()}

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        return self.backbone(images)["region"]
