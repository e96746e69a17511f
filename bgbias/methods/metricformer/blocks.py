"""MetricFormer's blocks: feature decoupling (FDB), the post-LN correlation block and its two attentions,
batch-wise (BCB, masked by a top-n similarity graph) and feature-wise (FCB), as docs/methods/metricformer.md
states them. Shapes: B samples, k sub-feature slots of d dimensions each."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class FeatureDecoupling(nn.Module):
    """k learnable queries attend over the H·W positions of a (B, C, H, W) map: ``A_S`` (B, k, HW), each row a
    softmax over positions, and the sub-features ``Z⁰ = A_S V`` (B, k, d)."""

    def __init__(self, channels: int, slots: int, dim: int, key_dim: int):
        super().__init__()
        self.keys = nn.Linear(channels, key_dim)  # g1
        self.values = nn.Linear(channels, dim)  # g2
        # Q1, shared by all samples
        self.queries = nn.Parameter(torch.randn(slots, key_dim) / math.sqrt(key_dim))
        self.key_dim = key_dim

    def attention(self, features: Tensor) -> tuple[Tensor, Tensor]:
        """(A_S, V): the (B, k, HW) attention and the (B, HW, d) values of a (B, C, H, W) map."""
        positions = features.flatten(2).transpose(1, 2)  # (B, HW, C)
        logits = self.queries @ self.keys(positions).transpose(1, 2) / math.sqrt(self.key_dim)
        return logits.softmax(dim=-1), self.values(positions)

    def forward(self, features: Tensor) -> Tensor:
        attention, values = self.attention(features)
        return attention @ values


def attention_entropy(attention: Tensor) -> Tensor:
    """The mean entropy of the FDB's attention rows (B, k, HW) as a fraction of log HW: 1 when every slot
    spreads evenly over the map, 0 when each looks at a single position. A value near 0 warns of slots that
    lock onto fixed positions (corners included) whatever the image shows."""
    positions = attention.shape[-1]
    if positions < 2:
        return attention.new_zeros(())
    entropy = -(attention * attention.clamp_min(1e-12).log()).sum(dim=-1)
    return entropy.mean() / math.log(positions)


def neighbour_graph(inputs: Tensor, neighbours: int, epsilon: float) -> Tensor:
    """G (B, B): ``G_uv = s_uv`` where v is among u's ``neighbours`` most similar samples (u itself included)
    and ``s_uv ≥ epsilon``, else 0; s is the cosine similarity of the detached, flattened (B, k·d) inputs."""
    flat = F.normalize(inputs.detach().flatten(1), dim=1)
    similarity = flat @ flat.T
    top = similarity.topk(neighbours, dim=1).indices
    chosen = torch.zeros_like(similarity, dtype=torch.bool).scatter_(1, top, True)
    return torch.where(chosen & (similarity >= epsilon), similarity, torch.zeros_like(similarity))


class CorrelationBlock(nn.Module):
    """A post-LN transformer encoder layer on (B, k, d) tokens, ``Ȳ = LN(Attn(Z) + Z)``,
    ``Y = LN(FFN(Ȳ) + Ȳ)``, one attention head with an output projection. ``batch_wise`` attends along the
    batch per slot, masked by :func:`neighbour_graph`; otherwise along the slots within each sample."""

    def __init__(self, dim: int, ffn_mult: int, *, batch_wise: bool, neighbours: int = 0,
                 epsilon: float = 0.0, renormalise: bool = False):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, ffn_mult * dim), nn.GELU(), nn.Linear(ffn_mult * dim, dim))
        self.batch_wise, self.neighbours, self.epsilon, self.renormalise = (
            batch_wise, neighbours, epsilon, renormalise)
        self.dim = dim

    def attention(self, tokens: Tensor) -> tuple[Tensor, Tensor | None]:
        """The attention's output (B, k, d) before the residual, and for a batch-wise block the graph G."""
        q, k, v = self.qkv(tokens).chunk(3, dim=-1)
        if not self.batch_wise:
            weights = (q @ k.transpose(1, 2) / math.sqrt(self.dim)).softmax(dim=-1)  # (B, k, k)
            return self.out(weights @ v), None
        graph = neighbour_graph(tokens, self.neighbours, self.epsilon)
        q, k, v = (t.transpose(0, 1) for t in (q, k, v))  # (k, B, d): one B×B attention per slot
        weights = (q @ k.transpose(1, 2) / math.sqrt(self.dim)).softmax(dim=-1) * graph
        if self.renormalise:
            weights = weights / weights.sum(dim=-1, keepdim=True).clamp_min(1e-12)
        return self.out(weights @ v).transpose(0, 1), graph

    def forward(self, tokens: Tensor) -> Tensor:
        update, graph = self.attention(tokens)
        hidden = self.norm1(update + tokens)
        output = self.norm2(self.ffn(hidden) + hidden)
        if graph is None:
            return output
        # A sample with no neighbour in the graph exchanges nothing and passes through unchanged.
        isolated = (graph == 0).all(dim=1)
        return torch.where(isolated[:, None, None], tokens, output)
