"""CosFace proxies that give their logits, which DCML multiplies by a dummy scale (the IRM penalty)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class CosFaceProxies(nn.Module):
    """One proxy per class; logits ``scale · (cos(z, c_j) − margin · 1[j = y])`` (the paper's eq. 1,
    docs/methods/dcml.md).

    The cross-entropy of these logits is pytorch-metric-learning's ``CosFaceLoss`` (tests check it).
    """

    def __init__(self, num_classes: int, dim: int, scale: float, margin: float):
        super().__init__()
        self.scale = float(scale)
        self.margin = float(margin)
        self.weight = nn.Parameter(torch.empty(num_classes, dim))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        cosine = F.normalize(embeddings, dim=1) @ F.normalize(self.weight, dim=1).T
        margins = F.one_hot(labels, cosine.shape[1]).to(cosine.dtype) * self.margin
        return self.scale * (cosine - margins)

    def extra_repr(self) -> str:
        return f"classes={self.weight.shape[0]}, dim={self.weight.shape[1]}, scale={self.scale}, " \
               f"margin={self.margin}"
