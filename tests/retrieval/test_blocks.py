"""Scoring in blocks of queries under a memory ceiling gives every query the scores of one whole search: the
same per-query values, means and kept neighbours, with every retrieval and with a clean gallery, though each
block is searched only for the neighbours its own queries need."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import bgbias
from bgbias.errors import OptionError
from bgbias.report.evaluate import GALLERY_NEIGHBOURS
from bgbias.retrieval.metrics import (
    BYTES_PER_NEIGHBOUR,
    KEPT_NEIGHBOURS,
    METRICS,
    MIN_BLOCK,
    query_blocks,
    retrieval_scores,
    score_embeddings,
)
from bgbias.retrieval.retrievers import ExactL2, LearnedDistance, ShortlistRerank
from bgbias.retrieval.search import FAISS_GPU_MAX_K, faiss_available, nearest_neighbours, squared_l2
from tests.retrieval.recording import Asked

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


def _learned() -> LearnedDistance:
    return LearnedDistance(lambda queries, references: squared_l2(queries, references).sqrt())


@pytest.mark.parametrize("gallery", [False, True])
@pytest.mark.parametrize("retrieval", ["faiss", "torch", "learned", "shortlist"])
def test_every_retrieval_scores_skewed_classes_in_blocks_as_in_one_search(retrieval, gallery):
    if retrieval == "faiss" and not faiss_available():
        pytest.skip("faiss is not installed")
    embeddings, labels = _set(count=400)
    noise = np.random.default_rng(1).normal(scale=0.3, size=embeddings.shape).astype(np.float32)
    state = torch.from_numpy(embeddings + noise)
    references = torch.from_numpy(embeddings) if gallery else None
    inner = {"faiss": ExactL2("faiss"), "torch": ExactL2("torch"), "learned": _learned(),
             "shortlist": ShortlistRerank(_learned(), shortlist=200)}[retrieval]
    asked = Asked(inner)
    whole = score_embeddings(state, labels, retrieval=inner, references=references)
    _same(whole, score_embeddings(state, labels, retrieval=asked, references=references,
                                  max_memory=TINY_CEILING))
    largest = int(np.bincount(labels).max()) - 1
    # each search asks for one neighbour more than R, to see where the R-th's tie group ends
    if inner.approximate:  # a shortlist's candidates depend on k: one k for every query
        assert set(asked.ks) == {largest + 1}
    else:  # the class of 150's queries ask for 150 neighbours, the others for what their classes need
        assert max(asked.ks) == largest + 1 and min(asked.ks) < 20


def test_blocks_take_the_largest_needs_first_each_sized_to_the_ceiling_for_its_own_k():
    need = np.concatenate([np.full(1000, 24), np.full(300, 999), [8] * 30])
    ceiling = 200 * BYTES_PER_NEIGHBOUR * 1000  # 200 queries at k = 999
    blocks = query_blocks(need, ceiling)
    assert sorted(np.concatenate(blocks).tolist()) == list(range(len(need)))
    assert all((np.diff(block) > 0).all() for block in blocks)
    ks = [int(need[block].max()) for block in blocks]
    # the second block, 100 queries of k = 999 and 100 of k = 24, is sized for its k of 999
    assert ks == [999, 999, 24] and [len(block) for block in blocks] == [200, 200, 930]
    # a rest shorter than MIN_BLOCK joins the block before it, which stays within MIN_BLOCK of its size
    short = query_blocks(np.full(MIN_BLOCK + 10, 5), MIN_BLOCK * BYTES_PER_NEIGHBOUR * 6)
    assert [len(block) for block in short] == [MIN_BLOCK + 10]
    assert len(query_blocks(need, 1 << 40)) == 1


def test_map_at_r_has_the_same_bits_however_many_neighbours_past_r_were_retrieved():
    rng = np.random.default_rng(0)
    r = rng.integers(1, 60, 400)
    knn_labels = rng.integers(0, 2, (400, 60))
    short = retrieval_scores(knn_labels, np.zeros(400, dtype=np.int64), r)
    padded = np.concatenate([knn_labels, rng.integers(0, 2, (400, 700))], axis=1)
    long = retrieval_scores(padded, np.zeros(400, dtype=np.int64), r)
    for name in METRICS:
        np.testing.assert_array_equal(short.per_query[name], long.per_query[name])


def _duplicates(copies: int = 6) -> np.ndarray:
    """40 distinct vectors, each ``copies`` times, shuffled: every item ties with its copies."""
    rng = np.random.default_rng(3)
    vectors = np.repeat(rng.normal(size=(40, 8)).astype(np.float32), copies, axis=0)
    return np.ascontiguousarray(vectors[rng.permutation(len(vectors))])


@pytest.mark.parametrize("backend", ["faiss", "torch"])
def test_ties_go_to_the_smaller_index_whatever_k_and_blocks(backend):
    if backend == "faiss" and not faiss_available():
        pytest.skip("faiss is not installed")
    vectors = _duplicates()
    longest = nearest_neighbours(vectors, 200, backend=backend)
    distances = ((vectors[:, None, :] - vectors[None, longest[0], :]) ** 2).sum(-1)[0]
    order = np.lexsort((longest[0], distances))
    assert (order == np.arange(200)).all()  # by distance, then by index
    for k in (1, 3, 5, 7, 11, 60):
        np.testing.assert_array_equal(nearest_neighbours(vectors, k, backend=backend), longest[:, :k])
        queries = np.arange(5, 200, 3)
        np.testing.assert_array_equal(nearest_neighbours(vectors, k, backend=backend, queries=queries),
                                      longest[queries, :k])
    if backend == "torch":
        from bgbias.retrieval.search import torch_ranking

        blocks = torch_ranking(vectors, 5, query_rows=7, reference_rows=13).on_host().indices
        np.testing.assert_array_equal(blocks, longest[:, :5])
    elif faiss_available():
        np.testing.assert_array_equal(longest, nearest_neighbours(vectors, 200, backend="torch"))


def test_exact_duplicates_score_in_blocks_as_in_one_search():
    vectors = _duplicates(copies=12)
    labels = np.arange(len(vectors)) % 37
    labels[:100] = 0  # one class of 100, so blocks of different k
    for retrieval in (ExactL2("faiss") if faiss_available() else ExactL2("torch"), ExactL2("torch")):
        _same(score_embeddings(vectors, labels, retrieval=retrieval),
              score_embeddings(vectors, labels, retrieval=retrieval, max_memory=TINY_CEILING))


@pytest.mark.slow
def test_the_torch_path_has_no_cap_on_k():
    """faiss's GPU index stops at k = 2,048 (bgbias then searches with faiss on the CPU); torch.topk has no
    such cap, and the torch path's streaming top-k finds more than that exactly."""
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(2300, 4)).astype(np.float32)
    k = FAISS_GPU_MAX_K + 100
    found = nearest_neighbours(vectors, k, backend="torch")
    distances = squared_l2(torch.from_numpy(vectors), torch.from_numpy(vectors)).numpy()
    np.fill_diagonal(distances, -1.0)  # the query itself first, then removed
    expected = np.argsort(distances, axis=1, kind="stable")[:, 1:k + 1]
    np.testing.assert_array_equal(found, expected)


def test_the_ceiling_must_be_positive_and_galleries_find_their_neighbours_kept():
    embeddings, labels = _set(count=200)
    with pytest.raises(OptionError, match="max_memory=0 is invalid: it must be an integer of at least 1"):
        bgbias.score_embeddings(embeddings, labels, max_memory=0)  # checked once, at the public boundary
    assert GALLERY_NEIGHBOURS <= KEPT_NEIGHBOURS


def test_eval_takes_its_memory_ceiling_as_a_size():
    import click

    from bgbias.cli.options import BYTES

    assert [BYTES.convert(text, None, None) for text in ("512M", "4G", "1.5k", "2048", "1GiB")] == [
        512 << 20, 4 << 30, 1536, 2048, 1 << 30]
    for wrong in ("lots", "0", "-1G", "", "  ", "K", "inf", "nan", "1e400G"):
        with pytest.raises(click.BadParameter):
            BYTES.convert(wrong, None, None)


@pytest.mark.parametrize("command", ["score", "eval"])
def test_an_empty_memory_ceiling_is_a_usage_error_naming_the_option(command):
    from click.testing import CliRunner

    from bgbias.cli import main

    result = CliRunner().invoke(main, [command, "--max-memory", ""])
    assert result.exit_code == 2 and "--max-memory" in result.output and "is not a size" in result.output
    assert not isinstance(result.exception, IndexError)
