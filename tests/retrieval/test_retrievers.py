"""The retrieval objects a model supplies: exact L2, a learned distance over named arrays, and the approximate
shortlist re-rank."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bgbias.errors import OptionError
from bgbias.retrieval.metrics import KEPT_NEIGHBOURS, score_embeddings
from bgbias.retrieval.retrievers import ExactL2, LearnedDistance, ShortlistRerank, with_shortlist
from bgbias.retrieval.search import nearest_neighbours, torch_ranking


def _levels(count: int = 40) -> dict[str, np.ndarray]:
    """A state of several named arrays, as AVSL keeps: two level embeddings and a certainty per image."""
    rng = np.random.default_rng(0)
    return {
        "embedding": rng.normal(size=(count, 6)).astype(np.float32),
        "level1": rng.normal(size=(count, 3)).astype(np.float32),
        "certainty": rng.uniform(0.1, 1.0, size=count).astype(np.float32),
    }


def _weighted(queries, references):
    """A distance that needs every array: certainty-weighted sum of the two levels' squared L2."""
    first = torch.cdist(queries["embedding"], references["embedding"]) ** 2
    second = torch.cdist(queries["level1"], references["level1"]) ** 2
    return first + queries["certainty"][:, None] * references["certainty"][None, :] * second


def _brute_force(state, k):
    tensors = {name: torch.from_numpy(array) for name, array in state.items()}
    full = _weighted(tensors, tensors).numpy()
    np.fill_diagonal(full, np.inf)
    return np.argsort(full, axis=1, kind="stable")[:, :k]


@pytest.mark.parametrize(("query_rows", "reference_rows"), [(7, 5), (40, 40), (1, 3)])
def test_a_learned_distance_over_named_arrays_streams_to_the_exact_ranking(query_rows, reference_rows):
    state = _levels()
    search = LearnedDistance(_weighted, query_rows=query_rows, reference_rows=reference_rows)
    ranked = search.neighbours(state, 5)
    assert np.array_equal(ranked, _brute_force(state, 5))


def test_a_full_shortlist_re_ranks_to_the_exact_ranking():
    state = _levels()
    exact = LearnedDistance(_weighted)
    full = ShortlistRerank(exact, shortlist=39)
    assert np.array_equal(full.neighbours(state, 5), exact.neighbours(state, 5))


def test_a_short_shortlist_only_finds_what_the_l2_search_put_on_it():
    state = _levels()
    reranked = ShortlistRerank(LearnedDistance(_weighted), shortlist=8).neighbours(state, 3)
    candidates = nearest_neighbours(state["embedding"], 8)
    assert all(set(row) <= set(pool) for row, pool in zip(reranked, candidates, strict=True))
    assert reranked.shape == (40, 3)


def test_a_query_sample_searches_like_the_same_rows_of_the_whole_split():
    state = _levels()
    chosen = np.array([3, 17, 38])
    sample = torch_ranking(state, 5, distance=_weighted, queries=chosen, query_rows=2).on_host().indices
    assert np.array_equal(sample, _brute_force(state, 5)[chosen])


def test_shortlist_recall_is_one_for_a_full_shortlist_and_counts_what_a_short_one_misses():
    state = _levels()
    labels = np.arange(40) % 5  # eight images per class: R = 7
    exact = LearnedDistance(_weighted)
    assert ShortlistRerank(exact, shortlist=39).recall(state, labels).recall == pytest.approx(1.0)
    short = ShortlistRerank(exact, shortlist=8)
    measured = short.recall(state, labels, queries=10, seed=1)
    chosen = np.sort(np.random.default_rng(1).permutation(40)[:10])
    truth, found = _brute_force(state, 7)[chosen], short.neighbours(state, 7)[chosen]
    expected = np.mean([len(set(a) & set(b)) / 7 for a, b in zip(truth, found, strict=True)])
    assert measured.queries == 10 and measured.recall == pytest.approx(expected)
    assert measured.recall < 1


def test_approximate_retrieval_says_so():
    shortlisted = with_shortlist(LearnedDistance(_weighted), 10)
    assert shortlisted.approximate and "shortlist of 10" in shortlisted.describe()
    assert not ExactL2().approximate and not LearnedDistance(_weighted).approximate
    assert with_shortlist(ExactL2(), None) == ExactL2()


def test_a_shortlist_for_an_exact_l2_search_is_refused():
    with pytest.raises(OptionError, match="only serves a learned distance"):
        with_shortlist(ExactL2(), 10)


def test_scores_of_a_named_state_use_every_array():
    state = _levels()
    labels = np.arange(40) % 4
    learned = score_embeddings(state, labels, retrieval=LearnedDistance(_weighted))
    knn = _brute_force(state, 9)
    assert np.array_equal(LearnedDistance(_weighted).neighbours(state, 9), knn)
    assert np.array_equal(learned.neighbours, knn[:, :KEPT_NEIGHBOURS])  # the scores keep the nearest few
    plain = score_embeddings(state, labels)  # ExactL2 over the "embedding" array only
    assert np.array_equal(plain.neighbours, nearest_neighbours(state["embedding"], 9)[:, :KEPT_NEIGHBOURS])


def test_arrays_of_other_lengths_or_non_finite_values_are_refused():
    state = _levels()
    with pytest.raises(OptionError, match="one row per image"):
        LearnedDistance(_weighted).neighbours({**state, "certainty": state["certainty"][:5]}, 3)
    broken = {**state, "level1": np.full_like(state["level1"], np.nan)}
    with pytest.raises(Exception, match="'level1' contains NaN"):
        LearnedDistance(_weighted).neighbours(broken, 3)


def test_exact_l2_needs_the_array_it_ranks_by():
    with pytest.raises(OptionError, match="no array 'level2'"):
        ExactL2(key="level2").neighbours(_levels(), 3)


def _brute_force_between(queries, references, k):
    """Each query's k nearest references by ``_weighted``, its own row left out."""
    full = _weighted(*({n: torch.from_numpy(a) for n, a in s.items()} for s in (queries, references))).numpy()
    np.fill_diagonal(full, np.inf)
    return np.argsort(full, axis=1, kind="stable")[:, :k]


def _shifted(state, seed=1):
    """The same images in another form: every array moved a little (a corrupted copy of a clean set)."""
    rng = np.random.default_rng(seed)
    return {name: (a + rng.normal(scale=0.5, size=a.shape)).astype(np.float32) if name != "certainty" else a
            for name, a in state.items()}


def test_queries_searched_among_references_leave_out_their_own_image_in_every_retrieval():
    clean, corrupted = _levels(), _shifted(_levels())
    exact = _brute_force_between(corrupted, clean, 5)
    learned = LearnedDistance(_weighted, query_rows=7, reference_rows=9)
    assert np.array_equal(learned.neighbours(corrupted, 5, clean), exact)
    assert np.array_equal(ShortlistRerank(learned, shortlist=39).neighbours(corrupted, 5, clean), exact)
    squared = ((corrupted["embedding"][:, None] - clean["embedding"][None]) ** 2).sum(-1)
    np.fill_diagonal(squared, np.inf)
    for backend in ("faiss", "torch"):
        found = ExactL2(backend=backend).neighbours(corrupted, 5, clean)
        assert np.array_equal(found, np.argsort(squared, axis=1, kind="stable")[:, :5]), backend


def test_query_side_scores_of_a_set_against_itself_are_its_own_scores():
    state, labels = _levels(), np.arange(40) % 4
    for retrieval in (ExactL2(), LearnedDistance(_weighted)):
        alone = score_embeddings(state, labels, retrieval=retrieval)
        against = score_embeddings(state, labels, retrieval=retrieval, references=state)
        assert np.array_equal(alone.neighbours, against.neighbours)
        assert alone.map_at_r == against.map_at_r


def test_references_of_other_images_are_refused():
    state = _levels()
    with pytest.raises(OptionError, match="not the queries' images in another form"):
        ExactL2().neighbours(state, 3, {name: a[:30] for name, a in state.items()})
    with pytest.raises(OptionError, match="not the queries' images in another form"):
        LearnedDistance(_weighted).neighbours(state, 3, {**state, "level1": state["level1"][:, :2]})
