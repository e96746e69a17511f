"""AVSL's similarity graph as pure tensor functions (docs/methods/avsl.md, *What is implemented*).

Shapes: B images, C channels of a level's feature map, r nodes per level (the per-level embedding size),
``…`` any leading shape, e.g. (B1, B2) for every pair of two sets. The edges ω are stored low × high (ω[m, n]:
low node m, high node n), as the authors store them; the normalised edges W̃ are high × low, the paper's
row-stochastic orientation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

EDGE_EPSILON = 1e-8
"""Added to a W̃ row's sum: a high node with no positive correlation gets an all-zero row (no correction)."""


# ---------------------------------------------------------------------------------------- per image
def pooled_embedding(features: Tensor, conv: nn.Conv2d) -> Tensor:
    """e^l (B, r): the level's 1×1 convolution (with bias) of GAP + GMP of its (B, C, h, w) map."""
    pooled = features.mean(dim=(2, 3), keepdim=True) + features.amax(dim=(2, 3), keepdim=True)
    return conv(pooled).flatten(1)


def linearised_max(features: Tensor) -> Tensor:
    """g̃(z) (B, C, h, w): h·w times each channel's maximum at its arg-max position, 0 elsewhere, so that its
    spatial mean is the channel's maximum. GMP written as an average is what lets the (linear) 1×1
    convolution spread the embedding over positions. A tie puts the whole spike at one of the tied
    positions (the authors' code does the same; the mean does not change)."""
    h, w = features.shape[2:]
    flat = features.flatten(2)
    peak, where = flat.max(dim=2, keepdim=True)
    return torch.zeros_like(flat).scatter_(2, where, peak * (h * w)).view_as(features)


def activation_maps(features: Tensor, conv: nn.Conv2d) -> Tensor:
    """u^l (B, r, h, w): the embedding's own 1×1 convolution applied at every position of z + g̃(z), so that
    the spatial mean of u^l is e^l exactly. Without gradient, from detached features: the maps only weigh
    nodes (certainty) and build edges, neither of which is trained through."""
    with torch.no_grad():
        z = features.detach()
        return conv(z + linearised_max(z))


CERTAINTY_MINIMA = ("row", "global")
"""What a map is shifted by before its spread is read (docs/methods/avsl.md, *Certainty*); ``row`` is the
authors' code, which produced the published numbers."""


def certainty(maps: Tensor, minimum: str = "row") -> Tensor:
    """η^l (B, r): how peaked each node's (B, r, h, w) map is. The map is shifted to be non-negative by its
    ``minimum`` (:data:`CERTAINTY_MINIMA`), L1-normalised over positions, and η is its unbiased standard
    deviation over positions (0 for a map of one position, where no spread exists)."""
    if maps.shape[2] * maps.shape[3] < 2:
        return maps.new_zeros(maps.shape[:2])
    if minimum == "row":
        shifted = maps - maps.amin(dim=3, keepdim=True)
    elif minimum == "global":
        shifted = maps - maps.amin(dim=(2, 3), keepdim=True)
    else:
        raise ValueError(f"unknown certainty minimum {minimum!r}: use one of {', '.join(CERTAINTY_MINIMA)}")
    return F.normalize(shifted.flatten(2), p=1, dim=2).std(dim=2)


# ---------------------------------------------------------------------------------------------- edges
def batch_edges(low_maps: Tensor, high_maps: Tensor) -> Tensor:
    """ω̂ (r_low, r_high): the batch mean of the cosine between low maps (pooled to size) and high maps."""
    low, high = low_maps.detach(), high_maps.detach()
    if low.shape[2:] != high.shape[2:]:
        low = F.adaptive_avg_pool2d(low, high.shape[2:])
    low = F.normalize(low.flatten(2), dim=2)
    high = F.normalize(high.flatten(2), dim=2)
    return torch.einsum("bmp,bnp->mn", low, high) / low.shape[0]


def moving_edges(edges: Tensor, batch: Tensor, momentum: float, first: Tensor | bool) -> Tensor:
    """ω ← γ ω + (1 − γ) ω̂, or ω̂ itself for the first batch (``first`` may be a bool tensor)."""
    mixed = momentum * edges + (1.0 - momentum) * batch
    if isinstance(first, bool):
        return batch.clone() if first else mixed
    return torch.where(first, batch, mixed)


def normalised_edges(edges: Tensor, k: int) -> Tensor:
    """W̃ (r_high, r_low) from ω (r_low, r_high): negative correlations set to 0, each high node n keeps its
    k largest ω[:, n] (every value equal to the k-th is kept, so ties never depend on a sort's order), and
    row n is renormalised to sum to 1 (plus :data:`EDGE_EPSILON`)."""
    positive = edges.clamp_min(0.0).T
    kth = positive.topk(k, dim=1).values[:, -1:]
    kept = torch.where(positive >= kth, positive, torch.zeros_like(positive))
    return kept / (kept.sum(dim=1, keepdim=True) + EDGE_EPSILON)


# ---------------------------------------------------------------------------------------------- pairs
@dataclass(frozen=True)
class Levels:
    """A set of N images (or proxies) as the graph sees them: the unit embedding of every level (L of
    (N, r)) and the certainty of levels 2 … L (L − 1 of (N, r); level 1's is never used)."""

    units: tuple[Tensor, ...]
    certainty: tuple[Tensor, ...]

    def __len__(self) -> int:
        return self.units[0].shape[0]

    def rows(self, start: int, stop: int) -> Levels:
        return Levels(tuple(u[start:stop] for u in self.units), tuple(c[start:stop] for c in self.certainty))


@dataclass(frozen=True)
class Graph:
    """What d̂ needs besides the two sets: W̃ (high × low) and the reliability slope α and bias β of every
    link (levels 2 … L, (r,) each), and the fixed gain γ_p inside the sigmoid."""

    edges: tuple[Tensor, ...]
    slope: tuple[Tensor, ...]
    bias: tuple[Tensor, ...]
    gain: float

    def to(self, dtype: torch.dtype) -> Graph:
        def cast(tensors: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
            return tuple(t.to(dtype) for t in tensors)

        return Graph(cast(self.edges), cast(self.slope), cast(self.bias), self.gain)


def node_differences(rows: Tensor, cols: Tensor) -> Tensor:
    """δ^l (B1, B2, r): the squared difference of every row's and column's unit embedding, per node."""
    return (rows[:, None, :] - cols[None, :, :]).square()


def reliability(rows: Tensor, cols: Tensor, slope: Tensor, bias: Tensor, gain: float) -> Tensor:
    """p^l (B1, B2, r) = sigmoid(γ_p (α ⊙ η(x) η(x') + β)) from the (B1, r) and (B2, r) certainties. The
    gain and slope go into the (B1, r) side first, so the (B1, B2, r) tensor takes one fused multiply-add
    and the sigmoid (the two passes over it that the pairwise cost cannot avoid)."""
    return torch.sigmoid(torch.addcmul(gain * bias, (gain * slope * rows)[:, None, :], cols[None, :, :]))


def rectify(lower: Tensor, nodes: Tensor, reliable: Tensor, edges: Tensor) -> Tensor:
    """δ̂^l = p^l ⊙ δ^l + (1 − p^l) ⊙ W̃^l δ̂^{l−1}, with ``lower`` the rectified δ̂^{l−1} (…, r_low)."""
    return torch.lerp(lower @ edges.T, nodes, reliable)


def graph_distance(rows: Levels, cols: Levels, graph: Graph, *,
                   detach_nodes: bool = False) -> tuple[Tensor, list[Tensor], list[Tensor]]:
    """(d̂ (B1, B2), every level's d^l = Σ_i δ^l_i (B1, B2), every link's mean reliability p^l (scalars)).

    ``detach_nodes`` routes the gradient as AVSL trains: d̂ reaches only the reliability parameters (its
    nodes are detached), while the level distances keep theirs. Level by level, so only a few (B1, B2, r)
    tensors live at once outside autograd.
    """
    hat: Tensor | None = None
    levels, mean_reliability = [], []
    for level, (a, b) in enumerate(zip(rows.units, cols.units, strict=True)):
        delta = node_differences(a, b)
        levels.append(delta.sum(dim=-1))
        if detach_nodes:
            delta = delta.detach()
        if hat is None:
            hat = delta
            continue
        link = level - 1
        p = reliability(rows.certainty[link], cols.certainty[link], graph.slope[link], graph.bias[link],
                        graph.gain)
        mean_reliability.append(p.detach().mean())
        hat = rectify(hat, delta, p, graph.edges[link])
    assert hat is not None
    return hat.sum(dim=-1), levels, mean_reliability


# ------------------------------------------------------------------------------------------ attribution
def node_weights(reliabilities: Sequence[Tensor], edges: Sequence[Tensor]) -> list[Tensor]:
    """w^l = 1ᵀΛ^l (…, r) for l = 1 … L: how much node i of level l counts in d̂ (Property 1), with
    Λ^L = P^L, Λ^l = (I − P^L) W̃^L ⋯ (I − P^{l+1}) W̃^{l+1} P^l and Λ^1 = (I − P^L) W̃^L ⋯ (I − P^2) W̃^2.

    d̂ = Σ_l Σ_i w^l_i δ^l_i, and Σ_l Σ_i w^l_i = r wherever every W̃ row sums to 1 (a zero row, a high node
    without positive correlations, passes nothing down). Computed top-down as row vectors, never as r × r
    matrices per pair.
    """
    weights: list[Tensor] = []
    incoming = torch.ones_like(reliabilities[-1])  # the weight reaching the top level's nodes: 1ᵀ
    for p, w in zip(reversed(reliabilities), reversed(edges), strict=True):
        weights.append(incoming * p)
        incoming = (incoming * (1.0 - p)) @ w
    weights.append(incoming)
    return weights[::-1]


def node_contributions(nodes: Sequence[Tensor], reliabilities: Sequence[Tensor],
                       edges: Sequence[Tensor]) -> list[Tensor]:
    """λ^l = w^l ⊙ δ^l (…, r) for l = 1 … L: each node's share of d̂; they sum to d̂ over levels and nodes."""
    return [w * delta for w, delta in zip(node_weights(reliabilities, edges), nodes, strict=True)]
