"""AVSL's base losses in dissimilarity form, on any (rows, columns) distance matrix d: a level's d^l or the
graph's d̂, smaller for more alike (docs/methods/avsl.md)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def log1p_sum_exp(x: Tensor, keep: Tensor, dim: int = 0) -> Tensor:
    """log(1 + Σ exp(x)) over the entries ``keep`` marks along ``dim``, stably; 0 where none is kept."""
    masked = x.masked_fill(~keep, float("-inf"))
    one = torch.zeros_like(masked.narrow(dim, 0, 1))
    return torch.logsumexp(torch.cat([masked, one], dim=dim), dim=dim)


def proxy_anchor_loss(distances: Tensor, labels: Tensor, proxy_labels: Tensor, *, alpha: float,
                      pos_margin: float, neg_margin: float) -> Tensor:
    """ProxyAnchor on (B, P) sample–proxy dissimilarities:

        mean over proxies with a positive of log(1 + Σ_pos exp(α (d − γ_pos)))
      + mean over all P proxies of log(1 + Σ_neg exp(−α (d − γ_neg)))

    On unit vectors (d = 2 − 2 cos) α = 16, γ_pos = 1.8, γ_neg = 2.2 is the usual cosine ProxyAnchor with
    α = 32, δ = 0.1.
    """
    positive = labels[:, None] == proxy_labels[None, :]
    pos_term = log1p_sum_exp(alpha * (distances - pos_margin), positive, dim=0)
    neg_term = log1p_sum_exp(-alpha * (distances - neg_margin), ~positive, dim=0)
    with_positive = positive.any(dim=0)
    # A proxy without positives has pos_term 0, so the sum over all of them is the sum over those with one.
    return pos_term.sum() / with_positive.sum().clamp_min(1) + neg_term.mean()


def hard_triplets(distances: Tensor, labels: Tensor, cutoff: float,
                  generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """(anchors, positives, negatives) from a (B, B) batch dissimilarity matrix: every image with another
    image of its class and one of another class is an anchor, with one random positive (never itself) and a
    hard negative, the nearest once dissimilarities are clamped from below at min(largest positive
    dissimilarity, ``cutoff``); of negatives tied there (all those nearer than the clamp) the first in batch
    order, as the authors' selector takes it (docs/methods/avsl.md, *Margin variant*).
    """
    d = distances.detach()
    same = labels[:, None] == labels[None, :]
    positive = same & ~torch.eye(len(labels), dtype=torch.bool, device=labels.device)
    negative = ~same
    anchors = (positive.any(dim=1) & negative.any(dim=1)).nonzero().flatten()
    if anchors.numel() == 0:
        return anchors, anchors, anchors
    clamp = min(float(d[positive].max()), cutoff)
    positives = torch.multinomial(positive[anchors].float(), 1, generator=generator).flatten()
    clamped = d[anchors].clamp_min(clamp).masked_fill(~negative[anchors], float("inf"))
    nearest = clamped == clamped.min(dim=1, keepdim=True).values
    order = torch.arange(len(labels), device=labels.device).expand_as(nearest)
    negatives = order.masked_fill(~nearest, len(labels)).amin(dim=1)
    return anchors, positives, negatives


def margin_loss(distances: Tensor, labels: Tensor, boundaries: Tensor,
                triplets: tuple[Tensor, Tensor, Tensor], *, margin: float) -> Tensor:
    """The margin loss on a (B, B) batch dissimilarity matrix with a learnable boundary β per class (the
    anchor's): [d(a, p) − (β − α)]_+ and [(β + α) − d(a, n)]_+, averaged over the terms that are active
    (non-zero). With no active term the loss is 0, not the 0/0 = NaN of averaging over none, and it still
    reaches ``distances`` and ``boundaries`` (with zero gradients)."""
    anchors, positives, negatives = triplets
    if anchors.numel() == 0:
        return distances.sum() * 0.0 + boundaries.sum() * 0.0
    beta = boundaries[labels[anchors]]
    pos = F.relu(distances[anchors, positives] - beta + margin)
    neg = F.relu(beta + margin - distances[anchors, negatives])
    terms = torch.cat([pos, neg])
    return terms.sum() / (terms > 0).sum().clamp_min(1)
