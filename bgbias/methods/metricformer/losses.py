"""MetricFormer's own loss terms: the diversity loss between a sample's sub-features and the consistency
constraint between the embeddings computed with and without the batch-wise blocks."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def diversity_loss(subfeatures: Tensor, alpha: float, margin: float) -> Tensor:
    """Mean over samples and slot pairs i < j of ``softplus(alpha · (cos(Z_i, Z_j) − margin))`` on (B, k, d)
    sub-features; 0 for a single slot."""
    unit = F.normalize(subfeatures, dim=-1)
    cosines = unit @ unit.transpose(1, 2)  # (B, k, k)
    slots = subfeatures.shape[1]
    if slots < 2:
        return subfeatures.sum() * 0.0
    rows, cols = torch.triu_indices(slots, slots, offset=1, device=subfeatures.device)
    return F.softplus(alpha * (cosines[:, rows, cols] - margin)).mean()


def consistency_loss(with_batch: Tensor, plain: Tensor, *, teacher: bool = False) -> Tensor:
    """Mean over samples of ``‖normalize(with_batch) − normalize(plain)‖²``; ``teacher`` stops the gradient
    on the batch-aware side, so only the plain (test-time) path moves towards it."""
    target = F.normalize(with_batch, dim=-1)
    if teacher:
        target = target.detach()
    return (target - F.normalize(plain, dim=-1)).pow(2).sum(dim=-1).mean()
