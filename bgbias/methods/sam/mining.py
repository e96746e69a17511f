"""SAM's tuples: which (anchor, positive, negative…) rows of an m-per-class batch a training step uses.

At most ``max_tuples`` valid tuples are drawn with a generator seeded by the batch's image indices, on the
CPU from the labels alone: the same batch gives the same tuples on any device, and a resumed run repeats an
uninterrupted one. Siamese pairs are up to half same-class, so the positive pairs (the only ones the mining
loss uses) are not drowned by the negative ones.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch
from torch import Tensor

from bgbias.errors import OptionError


@dataclass(frozen=True)
class Tuples:
    """``rows`` (T, roles) row indices into the batch; ``same`` (T,) bool for Siamese pairs, else None."""

    rows: Tensor
    same: Tensor | None = None

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    def to(self, device: torch.device | str) -> Tuples:
        same = None if self.same is None else self.same.to(device)
        return Tuples(self.rows.to(device), same)


def batch_generator(indices: Tensor) -> torch.Generator:
    """A CPU generator seeded by the batch's image indices (their order included), nothing else."""
    data = indices.detach().to("cpu", torch.int64).contiguous().numpy().tobytes()
    seed = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") >> 1
    return torch.Generator().manual_seed(seed)


def mine_tuples(labels: Tensor, indices: Tensor, variant: str, max_tuples: int) -> Tuples:
    """At most ``max_tuples`` tuples of ``variant`` from a batch with these labels, drawn with
    :func:`batch_generator` (``indices``); rows in ascending order of the drawn candidates. An OptionError
    when the batch has no same-class pair (every variant needs one)."""
    labels = labels.detach().to("cpu")
    generator = batch_generator(indices)
    same = labels[:, None] == labels[None, :]
    eye = torch.eye(len(labels), dtype=torch.bool)
    positive = same & ~eye
    if not bool(positive.any()) or bool(same.all()):
        raise OptionError(
            f"SAM found no {variant} tuple in a batch of {len(labels)} images of "
            f"{len(labels.unique())} classes: it needs two classes and two images of one class",
            fix="train with data.m_per_class of 2 or more and data.batch_size of at least 2 × m_per_class",
        )
    if variant == "siamese":
        return _pairs(positive, ~same, generator, max_tuples)
    candidates = (positive[:, :, None] & ~same[:, None, :]).nonzero()  # (a, p, n)
    rows = _draw(candidates, max_tuples, generator)
    if variant == "quadruplet":
        rows = _second_negatives(rows, labels, ~same, generator)
        if not len(rows):
            raise OptionError(
                f"SAM found no quadruplet in a batch of {len(labels)} images: every anchor has a single "
                "negative image",
                fix="train with more classes per batch (data.batch_size / data.m_per_class)",
            )
    return Tuples(rows)


def _draw(candidates: Tensor, count: int, generator: torch.Generator) -> Tensor:
    if len(candidates) <= count:
        return candidates
    chosen = torch.randperm(len(candidates), generator=generator)[:count].sort().values
    return candidates[chosen]


def _pairs(positive: Tensor, negative: Tensor, generator: torch.Generator, max_tuples: int) -> Tuples:
    upper = torch.ones_like(positive).triu(1)
    positives = _draw((positive & upper).nonzero(), (max_tuples + 1) // 2, generator)
    negatives = _draw((negative & upper).nonzero(), max_tuples - len(positives), generator)
    rows = torch.cat([positives, negatives])
    same = torch.arange(len(rows)) < len(positives)
    return Tuples(rows, same)


def _second_negatives(triplets: Tensor, labels: Tensor, negative: Tensor,
                      generator: torch.Generator) -> Tensor:
    """(a, p, n1) → (a, p, n1, n2): n2 a negative of a, of another class than n1 where the batch has one,
    else another image; triplets whose anchor has a single negative image are dropped."""
    anchor, first = triplets[:, 0], triplets[:, 2]
    others = negative[anchor] & (labels[None, :] != labels[first][:, None])
    fallback = negative[anchor].clone()
    fallback[torch.arange(len(first)), first] = False
    allowed = torch.where(others.any(dim=1, keepdim=True), others, fallback)
    draws = torch.rand(allowed.shape, generator=generator).masked_fill(~allowed, -1.0)
    keep = allowed.any(dim=1)
    return torch.cat([triplets, draws.argmax(dim=1, keepdim=True)], dim=1)[keep]
