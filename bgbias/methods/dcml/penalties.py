"""DCML's loss terms besides the plain proxy loss, as pure functions of one environment's batch: each a mean
weighted by the environment's per-sample weights (B,), as in the authors' code (docs/methods/dcml.md)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor


def weighted_mean(values: Tensor, weights: Tensor) -> Tensor:
    return (values * weights).sum() / weights.sum()


def environment_loss(logits: Tensor, labels: Tensor, weights: Tensor) -> Tensor:
    """L_env(d_j) (eq. 5): the weighted mean cross-entropy of the proxy logits."""
    return weighted_mean(F.cross_entropy(logits, labels, reduction="none"), weights)


def logit_scale_penalty(logits: Tensor, labels: Tensor, weights: Tensor) -> Tensor:
    """The IRM penalty ‖∇_v L_env(ℓ ⊙ v)‖² at the dummy v = 1 (eq. 7, IRMv1), with its graph."""
    scale = torch.ones(1, logits.shape[1], device=logits.device, dtype=logits.dtype, requires_grad=True)
    return _squared_gradients(environment_loss(logits * scale, labels, weights), [scale])[0]


def dummy_penalties(
    attended: Tensor, classify: Callable[[Tensor], Tensor], labels: Tensor, weights: Tensor
) -> tuple[Tensor, Tensor]:
    """The two penalties the environment learner maximises (eq. 11): ‖∇_v L‖² for a dummy logit scale v,
    and ‖∇_{u_s} L‖² + ‖∇_{u_c} L‖² for a dummy spatial map and channel vector on the attended map (the
    "θ_j = 1" attention); all dummies are 1, so one forward of ``classify`` serves both."""
    _, c, h, w = attended.shape
    options = {"device": attended.device, "dtype": attended.dtype, "requires_grad": True}
    spatial, channel = torch.ones(1, 1, h, w, **options), torch.ones(1, c, 1, 1, **options)
    logits = classify(attended * spatial * channel)
    scale = torch.ones(1, logits.shape[1], **options)
    scale_penalty, spatial_penalty, channel_penalty = _squared_gradients(
        environment_loss(logits * scale, labels, weights), [scale, spatial, channel]
    )
    return scale_penalty, spatial_penalty + channel_penalty


def compactness(embeddings: Tensor, labels: Tensor, weights: Tensor) -> Tensor:
    """The γ term as the authors compute it: the weighted mean squared distance of each embedding to its
    class's mean in the batch, the mean held fixed (no gradient through it)."""
    classes, inverse = labels.unique(return_inverse=True)
    sums = torch.zeros(len(classes), embeddings.shape[1], device=embeddings.device, dtype=embeddings.dtype)
    sums.index_add_(0, inverse, embeddings.detach())
    counts = torch.bincount(inverse, minlength=len(classes)).to(embeddings.dtype)
    means = sums / counts[:, None]
    return weighted_mean(((embeddings - means[inverse]) ** 2).sum(dim=1), weights)


def pair_compactness(embeddings: Tensor, partners: Tensor, weights: Tensor) -> Tensor:
    """The γ term of the authors' SOP code: the weighted mean squared distance of each embedding to its
    partner, another image of its class from the other half of the batch, the partner held fixed."""
    return weighted_mean(((embeddings - partners.detach()) ** 2).sum(dim=1), weights)


def _squared_gradients(loss: Tensor, dummies: list[Tensor]) -> list[Tensor]:
    gradients = torch.autograd.grad(loss, dummies, create_graph=True)
    return [(gradient**2).sum() for gradient in gradients]
