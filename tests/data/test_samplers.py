"""MPerClassBatchSampler: batch structure, coverage, determinism, epochs, ranks and refused settings."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from bgbias.data.samplers import MPerClassBatchSampler
from bgbias.errors import OptionError

# Seven classes of assorted sizes: 0 has fewer images than m=4, 3 is a multiple of 4, the others leave a
# short last chunk.
CLASS_SIZES = {0: 2, 1: 5, 2: 7, 3: 8, 4: 13, 5: 4, 6: 6}
LABELS = [label for label, size in CLASS_SIZES.items() for _ in range(size)]


def batches(sampler: MPerClassBatchSampler, epoch: int = 0) -> list[list[tuple[int, int]]]:
    sampler.set_epoch(epoch)
    return list(sampler)


def indices(batch_list) -> list[int]:
    return [index for batch in batch_list for index, _ in batch]


def test_batches_hold_m_images_of_distinct_classes():
    sampler = MPerClassBatchSampler(LABELS, m=4, batch_size=12, seed=0)
    for batch in batches(sampler):
        assert len(batch) == 12
        blocks = [[LABELS[i] for i, _ in batch[k : k + 4]] for k in range(0, 12, 4)]
        assert all(len(set(block)) == 1 for block in blocks)
        assert len({block[0] for block in blocks}) == 3


def test_a_coverage_epoch_sees_every_image():
    sampler = MPerClassBatchSampler(LABELS, m=4, batch_size=8, seed=3)
    for epoch in range(3):
        assert set(indices(batches(sampler, epoch))) == set(range(len(LABELS)))
        assert len(sampler) == len(batches(sampler, epoch))


def test_chunks_repeat_images_only_for_classes_smaller_than_m():
    sampler = MPerClassBatchSampler(LABELS, m=4, batch_size=8, seed=1)
    for batch in batches(sampler):
        for k in range(0, 8, 4):
            block = [i for i, _ in batch[k : k + 4]]
            if LABELS[block[0]] != 0:
                assert len(set(block)) == 4
    # class 0 (2 images) is topped up with its own images
    assert Counter(LABELS[i] for i in indices(batches(sampler)))[0] % 4 == 0


def test_same_seed_and_epoch_give_the_same_batches_and_epochs_differ():
    first = MPerClassBatchSampler(LABELS, m=4, batch_size=8, seed=7)
    second = MPerClassBatchSampler(LABELS, m=4, batch_size=8, seed=7)
    assert batches(first, 2) == batches(second, 2)
    assert batches(first, 2) == batches(first, 2)
    assert batches(first, 0) != batches(first, 1)
    assert batches(first, 0) != batches(MPerClassBatchSampler(LABELS, m=4, batch_size=8, seed=8), 0)


def test_repeated_draws_get_different_augmentation_seeds():
    sampler = MPerClassBatchSampler(LABELS, m=4, batch_size=8, seed=0, batches_per_epoch=20)
    draws = [draw for batch in batches(sampler) for draw in batch]
    seeds_of: dict[int, set[int]] = {}
    for index, seed in draws:
        seeds_of.setdefault(index, set()).add(seed)
    counts = Counter(index for index, _ in draws)
    assert max(counts.values()) > 1
    assert all(len(seeds_of[index]) == counts[index] for index in counts)


def test_fixed_epoch_length_cuts_one_stream_of_passes():
    """Consecutive short epochs continue each other, so together they still see every image."""
    full = MPerClassBatchSampler(LABELS, m=4, batch_size=8, seed=5)
    short = MPerClassBatchSampler(LABELS, m=4, batch_size=8, seed=5, batches_per_epoch=3)
    assert len(short) == 3
    stream = [batch for epoch in range(6) for batch in batches(short, epoch)]
    assert all(len(batches(short, epoch)) == 3 for epoch in range(6))
    first_pass = batches(full, 0)
    assert stream[: len(first_pass)] == first_pass
    assert set(indices(stream[: len(first_pass)])) == set(range(len(LABELS)))
    # A fresh sampler asked for a late epoch first gives the same batches.
    late = MPerClassBatchSampler(LABELS, m=4, batch_size=8, seed=5, batches_per_epoch=3)
    assert batches(late, 5) == stream[15:18]


@pytest.mark.parametrize("batches_per_epoch", [None, 4])
def test_ranks_take_every_world_size_th_global_batch(batches_per_epoch):
    world = 3
    single = MPerClassBatchSampler(
        LABELS, m=4, batch_size=8, seed=2, batches_per_epoch=batches_per_epoch and batches_per_epoch * world
    )
    global_batches = batches(single, 1)
    per_rank = -(-len(global_batches) // world)
    padded = [global_batches[i % len(global_batches)] for i in range(per_rank * world)]
    for rank in range(world):
        sampler = MPerClassBatchSampler(
            LABELS,
            m=4,
            batch_size=8,
            seed=2,
            rank=rank,
            world_size=world,
            batches_per_epoch=batches_per_epoch,
        )
        assert batches(sampler, 1) == padded[rank::world]
        assert len(sampler) == per_rank


def test_ranks_split_a_coverage_epoch_without_overlap_except_padding():
    world = 3
    ranks = [
        MPerClassBatchSampler(LABELS, m=4, batch_size=8, seed=4, rank=r, world_size=world) for r in range(3)
    ]
    per_rank = [batches(sampler, 0) for sampler in ranks]
    global_batches = batches(MPerClassBatchSampler(LABELS, m=4, batch_size=8, seed=4), 0)
    padding = len(per_rank[0]) * world - len(global_batches)
    assert 0 < padding < world  # this seed pads, so padding is exercised
    flat = [batch for rank_batches in per_rank for batch in rank_batches]
    assert all(batch in global_batches for batch in flat)
    repeated = len(flat) - len({tuple(batch) for batch in flat})
    assert repeated == padding
    assert set(indices(flat)) == set(range(len(LABELS)))


def test_m_equal_one_prefers_distinct_classes():
    sampler = MPerClassBatchSampler(LABELS, m=1, batch_size=5, seed=0)
    for batch in batches(sampler):
        assert len({LABELS[i] for i, _ in batch}) == 5
    assert set(indices(batches(sampler))) == set(range(len(LABELS)))


def test_m_equal_one_repeats_classes_when_there_are_too_few():
    sampler = MPerClassBatchSampler(LABELS, m=1, batch_size=16, seed=0)
    got = batches(sampler)
    assert all(len(batch) == 16 for batch in got)
    assert set(indices(got)) == set(range(len(LABELS)))
    assert len(got) == -(-len(LABELS) // 16)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"m": 0, "batch_size": 8}, "at least 1"),
        ({"m": 3, "batch_size": 8}, "multiple of m=3"),
        ({"m": 4, "batch_size": 32}, "needs 8 classes"),
        ({"m": 4, "batch_size": 8, "rank": 2, "world_size": 2}, "rank 2"),
        ({"m": 4, "batch_size": 8, "batches_per_epoch": 0}, "batches per epoch"),
        ({"m": 4, "batch_size": 8, "seed": -1}, "non-negative"),
    ],
)
def test_impossible_settings_are_refused(kwargs, message):
    options = {"seed": 0, **kwargs}
    with pytest.raises(OptionError, match=message) as info:
        MPerClassBatchSampler(LABELS, **options)
    assert info.value.fix


def test_empty_labels_and_negative_epoch_are_refused():
    with pytest.raises(OptionError, match="no images"):
        MPerClassBatchSampler([], m=1, batch_size=1, seed=0)
    with pytest.raises(OptionError, match="epoch"):
        MPerClassBatchSampler(LABELS, m=4, batch_size=8, seed=0).set_epoch(-1)


def test_large_classes_are_spread_over_the_pass():
    """A class with many chunks must not be left to crowd the end of the pass."""
    labels = [0] * 80 + [c for c in range(1, 21) for _ in range(4)]
    got = batches(MPerClassBatchSampler(labels, m=4, batch_size=8, seed=0))
    first_half = got[: len(got) // 2]
    share = np.mean([any(labels[i] == 0 for i, _ in batch) for batch in first_half])
    assert share > 0.3
