"""Training batches of ``m`` images from each of ``batch_size // m`` classes that see every image, on any
number of ranks (pytorch-metric-learning's ``MPerClassSampler`` does neither: docs/design.md, *Sampler*).

Batches come from *coverage passes*: each class's images are shuffled and cut into chunks of ``m`` (a short
last one topped up), every chunk used once, each batch taking chunks of distinct classes with probability
proportional to the chunks they have left. Pass ``p`` is a pure function of ``(seed, p)``; with
``batches_per_epoch=n`` epochs cut one stream of passes into slices of ``n`` batches per rank, so coverage
holds across short epochs. Every rank builds the same list and takes every ``world_size``-th batch. Each draw
carries its own augmentation seed, so a transform does not depend on the worker that runs it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np

from bgbias.errors import OptionError

Draw = tuple[int, int]
"""(dataset index, augmentation seed)."""

SEED_BOUND = 2**63
"""Augmentation seeds are drawn uniformly from [0, SEED_BOUND): distinct for repeated draws in practice."""


class MPerClassBatchSampler:
    """A torch ``batch_sampler`` yielding lists of :data:`Draw`, one per batch of this rank; call
    :meth:`set_epoch` before each epoch. Without ``batches_per_epoch`` one coverage pass is shared out, padded
    by repeating its first batches so every rank yields the same number."""

    def __init__(
        self,
        labels: Sequence[int],
        m: int,
        batch_size: int,
        seed: int,
        *,
        rank: int = 0,
        world_size: int = 1,
        batches_per_epoch: int | None = None,
    ):
        check_sampler_options(len(labels), m, batch_size, seed, rank, world_size, batches_per_epoch)
        members = class_members(labels)
        self.classes_per_batch = batch_size // m
        if len(members) < self.classes_per_batch and m > 1:
            raise OptionError(
                f"a batch of {batch_size} with m={m} needs {self.classes_per_batch} classes, but the "
                f"training data has only {len(members)}",
                fix=f"lower the batch size to at most {len(members) * m}, or raise m",
            )
        self.m = m
        self.batch_size = batch_size
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.batches_per_epoch = batches_per_epoch
        self._members = members
        self._epoch = 0
        self._pass_lengths: list[int] = []
        self._cached_pass: tuple[int, list[list[Draw]]] | None = None

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose batches the next iteration yields."""
        if epoch < 0:
            raise OptionError(f"epoch must be non-negative, got {epoch}", fix="count epochs from 0")
        self._epoch = epoch

    def __len__(self) -> int:
        if self.batches_per_epoch is not None:
            return self.batches_per_epoch
        return math.ceil(len(self._coverage_pass(self._epoch)) / self.world_size)

    def __iter__(self) -> Iterator[list[Draw]]:
        yield from self._global_batches()[self.rank :: self.world_size]

    def _global_batches(self) -> list[list[Draw]]:
        """This epoch's batches of all ranks, in order; a multiple of ``world_size`` long."""
        if self.batches_per_epoch is None:
            batches = self._coverage_pass(self._epoch)
            total = math.ceil(len(batches) / self.world_size) * self.world_size
            return [batches[i % len(batches)] for i in range(total)]
        per_epoch = self.batches_per_epoch * self.world_size
        return self._stream_slice(self._epoch * per_epoch, per_epoch)

    def _stream_slice(self, start: int, count: int) -> list[list[Draw]]:
        """Batches ``start … start+count-1`` of the stream of passes 0, 1, 2, …"""
        pass_index, offset = 0, start
        while offset >= self._pass_length(pass_index):
            offset -= self._pass_length(pass_index)
            pass_index += 1
        batches: list[list[Draw]] = []
        while len(batches) < count:
            batches += self._coverage_pass(pass_index)[offset : offset + count - len(batches)]
            pass_index, offset = pass_index + 1, 0
        return batches

    def _pass_length(self, pass_index: int) -> int:
        while len(self._pass_lengths) <= pass_index:
            self._coverage_pass(len(self._pass_lengths))
        return self._pass_lengths[pass_index]

    def _coverage_pass(self, pass_index: int) -> list[list[Draw]]:
        """Pass ``pass_index``, built once and kept until another pass is asked for."""
        if self._cached_pass is None or self._cached_pass[0] != pass_index:
            rng = np.random.default_rng(np.random.SeedSequence([self.seed, pass_index]))
            batches = coverage_pass(self._members, self.m, self.classes_per_batch, rng)
            if len(self._pass_lengths) == pass_index:
                self._pass_lengths.append(len(batches))
            self._cached_pass = (pass_index, batches)
        return self._cached_pass[1]


def check_sampler_options(
    n_items: int,
    m: int,
    batch_size: int,
    seed: int,
    rank: int,
    world_size: int,
    batches_per_epoch: int | None,
) -> None:
    """Refuse settings no sampler can honour, each with the fix."""
    if n_items == 0:
        raise OptionError("the training split holds no images", fix="check the dataset and the split")
    if m < 1:
        raise OptionError(f"m (images per class in a batch) must be at least 1, got {m}", fix="pass m >= 1")
    if batch_size < 1 or batch_size % m != 0:
        raise OptionError(
            f"the batch size {batch_size} is not a positive multiple of m={m}",
            fix=f"choose a batch size that m divides, e.g. {max(1, batch_size // m) * m}",
        )
    if seed < 0:
        raise OptionError(f"the seed must be non-negative, got {seed}", fix="pass a seed >= 0")
    if world_size < 1 or not 0 <= rank < world_size:
        raise OptionError(f"rank {rank} is not one of the {world_size} ranks",
                          fix="pass 0 <= rank < world_size")
    if batches_per_epoch is not None and batches_per_epoch < 1:
        raise OptionError(
            f"batches per epoch must be at least 1, got {batches_per_epoch}",
            fix="pass a positive number, or none to make each epoch one pass over the data",
        )


def class_members(labels: Sequence[int]) -> list[np.ndarray]:
    """The dataset indices of each class, classes in label order, indices ascending."""
    label_array = np.asarray(labels, dtype=np.int64)
    order = np.argsort(label_array, kind="stable")
    _, counts = np.unique(label_array, return_counts=True)
    return np.split(order, np.cumsum(counts)[:-1])


def coverage_pass(
    members: Sequence[np.ndarray], m: int, classes_per_batch: int, rng: np.random.Generator
) -> list[list[Draw]]:
    """One pass: every index of ``members`` (the indices of each class) in at least one batch, of distinct
    classes where there are ``classes_per_batch`` of them (else, only for ``m = 1``, any images)."""
    if len(members) >= classes_per_batch:
        batches = distinct_class_batches(members, m, classes_per_batch, rng)
    else:
        batches = shuffled_chunks(np.concatenate(members), classes_per_batch, rng)
    indices = np.stack(batches)
    seeds = rng.integers(0, SEED_BOUND, size=indices.shape, dtype=np.int64)
    return [list(zip(row, row_seeds, strict=True)) for row, row_seeds in zip(indices.tolist(), seeds.tolist(),
                                                                              strict=True)]


def distinct_class_batches(
    members: Sequence[np.ndarray], m: int, classes_per_batch: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Batches (flat index arrays) of one chunk from each of ``classes_per_batch`` distinct classes."""
    chunks = [shuffled_chunks(indices, m, rng) for indices in members]
    left = np.array([len(c) for c in chunks], dtype=np.int64)
    all_classes = np.arange(len(members))
    batches = []
    while left.any():
        active = np.flatnonzero(left)
        if len(active) >= classes_per_batch:
            weights = left[active] / left[active].sum()
            chosen = rng.choice(active, size=classes_per_batch, replace=False, p=weights)
            fill = np.empty(0, dtype=np.int64)
        else:
            chosen = rng.permutation(active)
            others = np.setdiff1d(all_classes, active, assume_unique=True)
            fill = rng.choice(others, size=classes_per_batch - len(active), replace=False)
        left[chosen] -= 1
        batch = [chunks[c][left[c]] for c in chosen]
        batch += [fresh_chunk(members[c], m, rng) for c in fill]
        batches.append(np.concatenate(batch))
    return batches


def shuffled_chunks(indices: np.ndarray, size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``indices`` shuffled and cut into chunks of ``size``; a short last chunk is topped up from the other
    chunks without repeats (with repeats when there are fewer than ``size`` indices)."""
    order = rng.permutation(indices)
    chunks = [order[i : i + size] for i in range(0, len(order), size)]
    missing = size - len(chunks[-1])
    if missing:
        if len(order) >= size:
            extra = rng.choice(order[: len(order) - len(chunks[-1])], size=missing, replace=False)
        else:
            extra = rng.choice(order, size=missing, replace=True)
        chunks[-1] = np.concatenate([chunks[-1], extra])
    return chunks


def fresh_chunk(indices: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
    """``m`` random images of one class (repeats only when the class has fewer than ``m``)."""
    return rng.choice(indices, size=m, replace=len(indices) < m)
