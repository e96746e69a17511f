"""The embedding head of the baselines: global pooling, one linear layer, L2 normalisation.

This module defines an ``nn.Module`` and so imports torch at load time; only model-building code imports it.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from bgbias.errors import OptionError

POOLINGS = ("avg", "max", "avg+max")


def global_pool(feature_map: Tensor, pooling: str) -> Tensor:
    """(B, C, H, W) -> (B, C) by spatial mean, max, or their sum (``avg+max``, AVSL's GAP + GMP)."""
    if pooling == "avg":
        return feature_map.mean(dim=(2, 3))
    if pooling == "max":
        return feature_map.amax(dim=(2, 3))
    if pooling == "avg+max":
        return feature_map.mean(dim=(2, 3)) + feature_map.amax(dim=(2, 3))
    raise OptionError(f"unknown pooling {pooling!r}", fix=f"choose from: {', '.join(POOLINGS)}")


class EmbeddingHead(nn.Module):
    """Feature map (B, C, H, W) -> embedding (B, dim), unit length when ``normalize`` (cosine retrieval)."""

    def __init__(self, in_channels: int, dim: int, pooling: str = "avg", normalize: bool = True):
        super().__init__()
        if pooling not in POOLINGS:
            raise OptionError(f"unknown pooling {pooling!r}", fix=f"choose from: {', '.join(POOLINGS)}")
        self.pooling = pooling
        self.normalize = normalize
        self.linear = nn.Linear(in_channels, dim)

    def forward(self, feature_map: Tensor) -> Tensor:
        embedding = self.linear(global_pool(feature_map, self.pooling))
        return F.normalize(embedding, dim=1) if self.normalize else embedding

    def extra_repr(self) -> str:
        return f"pooling={self.pooling!r}, normalize={self.normalize}"
