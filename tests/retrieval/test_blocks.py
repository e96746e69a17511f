"""Scoring in blocks of queries under a memory ceiling gives every query the scores of one whole search: the
same per-query values, means and kept neighbours, with every retrieval and with a clean gallery."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bgbias.errors import OptionError
from bgbias.report.evaluate import GALLERY_NEIGHBOURS
from bgbias.retrieval.metrics import KEPT_NEIGHBOURS, METRICS, MIN_BLOCK, score_embeddings
from bgbias.retrieval.retrievers import ExactL2, LearnedDistance, ShortlistRerank
from bgbias.retrieval.search import faiss_available, squared_l2

TINY_CEILING = 1
"""A ceiling no block fits: every block is MIN_BLOCK queries."""


def _set(count: int = 700, dim: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Embeddings with classes of very different sizes: one of 150 (R = 149), many small, a few alone."""
    rng = np.random.default_rng(seed)
    labels = np.concatenate([np.zeros(150, dtype=np.int64), rng.integers(1, 120, count - 155),
                             np.arange(1000, 1005)])
    centres = rng.normal(size=(labels.max() + 1, dim))
    embeddings = (centres[labels] + 0.8 * rng.normal(size=(count, dim))).astype(np.float32)
    return embeddings, labels


def _same(whole, blocks) -> None:
    for name in (*METRICS, "r"):
        np.testing.assert_array_equal(whole.per_query[name], blocks.per_query[name])
    assert (whole.map_at_r, whole.r_precision, whole.precision_at_1, whole.scored) == (
        blocks.map_at_r, blocks.r_precision, blocks.precision_at_1, blocks.scored)
    np.testing.assert_array_equal(whole.neighbours, blocks.neighbours)


@pytest.mark.parametrize("backend", ["faiss", "torch"])
def test_blocks_of_queries_score_as_one_search(backend):
    if backend == "faiss" and not faiss_available():
        pytest.skip("faiss is not installed")
    embeddings, labels = _set()
    retrieval = ExactL2(backend)
    whole = score_embeddings(embeddings, labels, retrieval=retrieval)
    blocks = score_embeddings(embeddings, labels, retrieval=retrieval, max_memory=TINY_CEILING)
    _same(whole, blocks)
    assert len(embeddings) > 10 * MIN_BLOCK and whole.neighbours.shape == (len(embeddings), KEPT_NEIGHBOURS)
    # The kept columns are copies: a view would hold every query's k neighbours for the result's lifetime.
    assert whole.neighbours.base is None and blocks.neighbours.base is None


def test_blocks_against_a_clean_gallery_score_as_one_search():
    embeddings, labels = _set()
    noise = np.random.default_rng(1).normal(scale=0.3, size=embeddings.shape)
    corrupted = embeddings + noise.astype(np.float32)
    whole = score_embeddings(corrupted, labels, references=embeddings)
    _same(whole, score_embeddings(corrupted, labels, references=embeddings, max_memory=TINY_CEILING))


def test_a_learned_distance_and_its_shortlist_score_in_blocks_as_in_one_search():
    embeddings, labels = _set(count=400)
    state = torch.from_numpy(embeddings)
    learned = LearnedDistance(lambda queries, references: squared_l2(queries, references).sqrt())
    _same(score_embeddings(state, labels, retrieval=learned),
          score_embeddings(state, labels, retrieval=learned, max_memory=TINY_CEILING))
    shortlist = ShortlistRerank(learned, shortlist=200)
    _same(score_embeddings(state, labels, retrieval=shortlist),
          score_embeddings(state, labels, retrieval=shortlist, max_memory=TINY_CEILING))


def test_the_ceiling_must_be_positive_and_galleries_find_their_neighbours_kept():
    embeddings, labels = _set(count=200)
    with pytest.raises(OptionError, match="max_memory must be a positive number of bytes"):
        score_embeddings(embeddings, labels, max_memory=0)
    assert GALLERY_NEIGHBOURS <= KEPT_NEIGHBOURS


def test_eval_takes_its_memory_ceiling_as_a_size():
    import click

    from bgbias.cli.options import BYTES

    assert [BYTES.convert(text, None, None) for text in ("512M", "4G", "1.5k", "2048", "1GiB")] == [
        512 << 20, 4 << 30, 1536, 2048, 1 << 30]
    for wrong in ("lots", "0", "-1G"):
        with pytest.raises(click.BadParameter):
            BYTES.convert(wrong, None, None)
