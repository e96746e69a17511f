"""The embedding head of the baselines: global pooling, one linear layer, L2 normalisation."""

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
    """Feature map (B, C, H, W) -> unit-length embedding (B, dim) (cosine retrieval)."""

    def __init__(self, in_channels: int, dim: int, pooling: str = "avg"):
        super().__init__()
        if pooling not in POOLINGS:
            raise OptionError(f"unknown pooling {pooling!r}", fix=f"choose from: {', '.join(POOLINGS)}")
        self.pooling = pooling
        self.linear = nn.Linear(in_channels, dim)

    def forward(self, feature_map: Tensor) -> Tensor:
        return F.normalize(self.linear(global_pool(feature_map, self.pooling)), dim=1)

    def extra_repr(self) -> str:
        return f"pooling={self.pooling!r}"
