"""MAP@R, R-precision and P@1: hand-computed cases, lone queries, equality with PML's AccuracyCalculator."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from bgbias.errors import OptionError
from bgbias.retrieval.metrics import (
    METRICS,
    RetrievalScores,
    chance_per_query,
    chance_scores,
    retrieval_scores,
    score_embeddings,
)
from bgbias.retrieval.retrievers import ExactL2
from tests.retrieval.recording import Asked


def _pml_scores(embeddings: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

    calculator = AccuracyCalculator(
        include=("mean_average_precision_at_r", "r_precision", "precision_at_1"),
        k="max_bin_count",
        device=torch.device("cpu"),
    )
    scores = calculator.get_accuracy(embeddings, labels)
    return {
        "map_at_r": scores["mean_average_precision_at_r"],
        "r_precision": scores["r_precision"],
        "precision_at_1": scores["precision_at_1"],
    }


def _assert_equal_to_pml(ours: RetrievalScores, embeddings: np.ndarray, labels: np.ndarray) -> None:
    for name, value in _pml_scores(embeddings, labels).items():
        assert getattr(ours, name) == pytest.approx(value, abs=1e-6), name


def test_hand_computed_neighbour_labels():
    knn_labels = np.array([[0, 1, 0, 0], [2, 1, 1, 1], [1, 2, 2, 0], [0, 0, 0, 0]])
    query_labels = np.array([0, 1, 2, 3])
    r = np.array([3, 1, 2, 0])
    scores = retrieval_scores(knn_labels, query_labels, r)
    # Query 0: hits at ranks 1 and 3 of its R=3 -> AP (1 + 2/3)/3; query 1: its one relevant place missed;
    # query 2: a hit at rank 2 of R=2 -> AP (1/2)/2; query 3 is alone in its class.
    expected = {
        "map_at_r": [5 / 9, 0.0, 1 / 4],
        "r_precision": [2 / 3, 0.0, 1 / 2],
        "precision_at_1": [1.0, 0.0, 0.0],
    }
    for name, values in expected.items():
        assert np.allclose(scores.per_query[name][:3], values), name
        assert math.isnan(scores.per_query[name][3])
        assert getattr(scores, name) == pytest.approx(sum(values) / 3)
    assert scores.per_query["r"].tolist() == [3, 1, 2, 0]
    assert scores.scored == 3


def test_hits_beyond_rank_r_do_not_count():
    scores = retrieval_scores(np.array([[1, 0, 0, 0]]), np.array([0]), np.array([1]))
    assert (scores.map_at_r, scores.r_precision, scores.precision_at_1) == (0.0, 0.0, 0.0)


@pytest.mark.slow
def test_one_dimensional_embeddings_with_a_lone_query():
    embeddings = np.array([[0.0], [1.0], [6.0], [10.0], [13.0], [30.0]], dtype=np.float32)
    labels = np.array([0, 0, 1, 1, 1, 2])
    # No two distances from one point are equal. k = 2. Item 2 (at 6, class 1, R = 2) ranks item 3 (class 1)
    # then item 1 (class 0): AP (1/1)/2. The other scored items find their class first; item 5 is alone.
    scores = score_embeddings(embeddings, labels, retrieval=ExactL2("faiss"))
    assert np.allclose(scores.per_query["map_at_r"][:5], [1, 1, 0.5, 1, 1])
    assert np.allclose(scores.per_query["r_precision"][:5], [1, 1, 0.5, 1, 1])
    assert np.allclose(scores.per_query["precision_at_1"][:5], [1, 1, 1, 1, 1])
    assert scores.per_query["r"].tolist() == [1, 1, 2, 2, 2, 0]
    assert (scores.map_at_r, scores.r_precision, scores.precision_at_1) == pytest.approx((0.9, 0.9, 1.0))
    assert scores.as_dict() == {
        "map_at_r": pytest.approx(0.9), "r_precision": pytest.approx(0.9), "precision_at_1": 1.0, "scored": 5,
    }
    _assert_equal_to_pml(scores, embeddings, labels)


def test_per_query_scores_follow_the_input_order():
    embeddings = np.array([[0.0], [1.0], [6.0], [10.0], [13.0], [30.0]], dtype=np.float32)
    labels = np.array([0, 0, 1, 1, 1, 2])
    order = np.array([5, 2, 0, 4, 1, 3])
    straight = score_embeddings(embeddings, labels)
    shuffled = score_embeddings(embeddings[order], labels[order])
    for name in ("map_at_r", "r_precision", "precision_at_1", "r"):
        assert np.array_equal(shuffled.per_query[name], straight.per_query[name][order], equal_nan=True)


def test_all_lone_queries_give_nan_means_and_none_in_json():
    scores = score_embeddings(np.arange(4, dtype=np.float32)[:, None], np.array([3, 1, 2, 0]))
    assert scores.scored == 0
    assert all(math.isnan(v) for v in (scores.map_at_r, scores.r_precision, scores.precision_at_1))
    assert np.isnan(scores.per_query["map_at_r"]).all()
    assert json.loads(json.dumps(scores.as_dict())) == {
        "map_at_r": None, "r_precision": None, "precision_at_1": None, "scored": 0,
    }


def test_as_dict_holds_plain_python_numbers():
    scores = score_embeddings(np.random.default_rng(0).normal(size=(30, 4)), np.arange(30) % 5)
    values = scores.as_dict()
    assert set(values) == {"map_at_r", "r_precision", "precision_at_1", "scored"}
    assert all(type(values[name]) is float for name in ("map_at_r", "r_precision", "precision_at_1"))
    assert type(values["scored"]) is int and values["scored"] == 30


def _random_split(seed: int, classes: int, count: int, tied: bool) -> tuple[np.ndarray, np.ndarray]:
    """Random labels (one class forced to hold a single, lone item) and embeddings, tied if asked."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, count)
    labels[0] = classes  # a lone query
    if tied:
        embeddings = rng.integers(0, 3, size=(count, 4)).astype(np.float32)
        embeddings[count // 2 : count // 2 + 20] = embeddings[1]  # duplicated rows of mixed classes
    else:
        embeddings = rng.normal(size=(count, 16)).astype(np.float32)
        embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    return embeddings, labels


@pytest.mark.slow
@pytest.mark.parametrize(
    ("seed", "classes", "count"), [(0, 2, 400), (1, 11, 500), (2, 60, 700), (3, 150, 600)]
)
def test_faiss_backend_equals_pml_accuracy_calculator_without_ties(seed, classes, count):
    embeddings, labels = _random_split(seed, classes, count, tied=False)
    scores = score_embeddings(embeddings, labels, retrieval=ExactL2("faiss"))
    _, sizes = np.unique(labels, return_counts=True)
    assert scores.scored == count - (sizes == 1).sum()
    _assert_equal_to_pml(scores, embeddings, labels)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_torch_backend_equals_faiss_without_ties(seed):
    embeddings, labels = _random_split(seed, 20, 400, tied=False)
    torch_scores = score_embeddings(embeddings, labels, retrieval=ExactL2("torch"))
    faiss_scores = score_embeddings(embeddings, labels, retrieval=ExactL2("faiss"))
    assert torch_scores == faiss_scores
    for name, values in faiss_scores.per_query.items():
        assert np.array_equal(torch_scores.per_query[name], values, equal_nan=True)


def test_sop_sized_neighbour_labels_equal_a_per_query_loop():
    rng = np.random.default_rng(0)
    count, k = 60_502, 11
    query_labels = rng.integers(0, 11_300, count)
    others = rng.integers(0, 11_300, (count, k))
    knn_labels = np.where(rng.random((count, k)) < 0.3, query_labels[:, None], others)
    r = rng.integers(0, k + 1, count)
    scores = retrieval_scores(knn_labels, query_labels, r)
    for q in rng.choice(count, 200, replace=False):
        if r[q] == 0:
            assert math.isnan(scores.per_query["map_at_r"][q])
            continue
        hits = knn_labels[q, : r[q]] == query_labels[q]
        precisions = np.cumsum(hits) / np.arange(1, r[q] + 1)
        assert scores.per_query["map_at_r"][q] == pytest.approx(precisions[hits].sum() / r[q])
        assert scores.per_query["r_precision"][q] == pytest.approx(hits.sum() / r[q])
        assert scores.per_query["precision_at_1"][q] == float(knn_labels[q, 0] == query_labels[q])


def test_inconsistent_inputs_are_option_errors():
    with pytest.raises(OptionError, match="one label per embedding"):
        score_embeddings(np.zeros((4, 2)), np.array([0, 0, 1]))
    with pytest.raises(OptionError, match="one label per embedding"):
        score_embeddings(np.zeros((0, 2)), np.array([]))
    with pytest.raises(OptionError, match="max\\(R\\)"):
        retrieval_scores(np.array([[0, 0]]), np.array([0]), np.array([3]))
    with pytest.raises(OptionError, match="shapes"):
        retrieval_scores(np.array([0, 0]), np.array([0]), np.array([1]))


@pytest.mark.slow
def test_chance_scores_are_the_means_of_random_rankings():
    labels = np.repeat(np.arange(5), [2, 3, 5, 8, 1])
    rng = np.random.default_rng(0)
    _, class_of, sizes = np.unique(labels, return_inverse=True, return_counts=True)
    r, k = sizes[class_of] - 1, int(sizes.max()) - 1
    draws = []
    for _ in range(4000):
        others = [np.delete(np.arange(len(labels)), i) for i in range(len(labels))]
        knn = np.array([rng.permutation(row)[:k] for row in others])
        scores = retrieval_scores(labels[knn], labels, r)
        draws.append([scores.map_at_r, scores.r_precision, scores.precision_at_1])
    expected = chance_scores(labels)
    assert np.mean(draws, axis=0) == pytest.approx([expected[m] for m in METRICS], abs=0.004)
    assert chance_scores(np.array([0, 0, 0]))["map_at_r"] == pytest.approx(1.0)  # everything is relevant


def test_each_querys_chance_averages_to_the_chance_scores_and_a_lone_query_has_none():
    labels = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2, 3])
    per_query = chance_per_query(labels)
    assert np.isnan(per_query["map_at_r"][9]) and np.isnan(per_query["precision_at_1"][9])
    assert per_query["precision_at_1"][0] == pytest.approx(2 / 9)
    assert per_query["map_at_r"][3] == pytest.approx(1 / 9)  # R = 1: the one relevant item on top
    for name, mean in chance_scores(labels).items():
        assert np.nanmean(per_query[name]) == pytest.approx(mean)


def _every_order(labels: list[int], groups: list[int], query: int, r: int) -> list[float]:
    """The three metrics averaged over every order of each tie group (``groups``: their sizes in rank
    order), by enumeration."""
    import itertools

    spans, start = [], 0
    for size in groups:
        spans.append(list(itertools.permutations(labels[start:start + size])))
        start += size
    draws = []
    for orders in itertools.product(*spans):
        ranked = np.array([label for order in orders for label in order])[None, :]
        scores = retrieval_scores(ranked, np.array([query]), np.array([r]))
        draws.append([scores.map_at_r, scores.r_precision, scores.precision_at_1])
    return np.mean(draws, axis=0).tolist()


@pytest.mark.parametrize(("labels", "groups", "r"), [
    ([0, 1, 0, 1, 2, 0], [1, 3, 2], 2),  # a group of three straddles rank R = 2
    ([1, 0, 0, 1, 0, 2, 0], [4, 1, 2], 4),  # the first group is the top R, the R-th tie with rank 1
    ([1, 1, 0, 0, 0, 1, 0], [2, 5], 4),  # the last group goes past R and holds relevant items beyond it
    ([0, 0, 0, 0, 1], [5], 4),  # every item tied: chance
])
def test_tied_neighbours_score_their_expected_value_over_every_order(labels, groups, r):
    distances = np.repeat(np.arange(len(groups), dtype=np.float32), groups)[None, :]
    scores = retrieval_scores(np.array([labels]), np.array([0]), np.array([r]), distances)
    assert [scores.map_at_r, scores.r_precision, scores.precision_at_1] == pytest.approx(
        _every_order(labels, groups, 0, r), abs=1e-12)


def _shuffled_alike(scores, shuffled, order) -> None:
    for name in (*METRICS, "r"):
        np.testing.assert_allclose(shuffled.per_query[name], scores.per_query[name][order], rtol=0,
                                   atol=1e-12)


def _tied_set(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Few distinct points, many duplicates across classes, classes in row order: every tie straddles."""
    rng = np.random.default_rng(seed)
    labels = np.sort(rng.integers(0, 7, 150))
    embeddings = rng.integers(0, 2, size=(150, 3)).astype(np.float32)
    return embeddings, labels


@pytest.mark.parametrize("gallery", [False, True], ids=["itself", "gallery"])
@pytest.mark.parametrize("retrieval", ["faiss", "torch", "learned", "shortlist"])
@pytest.mark.parametrize("max_memory", [1 << 30, 1], ids=["one block", "blocks"])
def test_scores_of_tied_data_do_not_depend_on_the_order_of_the_rows(retrieval, gallery, max_memory):
    from bgbias.retrieval.retrievers import LearnedDistance, ShortlistRerank
    from bgbias.retrieval.search import faiss_available, squared_l2

    if retrieval == "faiss" and not faiss_available():
        pytest.skip("faiss is not installed")
    learned = LearnedDistance(lambda queries, references: squared_l2(queries, references).sqrt())
    search = {"faiss": ExactL2("faiss"), "torch": ExactL2("torch"), "learned": learned,
              "shortlist": ShortlistRerank(learned, shortlist=40)}[retrieval]
    embeddings, labels = _tied_set()
    references = embeddings[::-1].copy() if gallery else None  # another form of each image: still tied
    order = np.random.default_rng(1).permutation(len(labels))
    straight = score_embeddings(embeddings, labels, retrieval=search, references=references,
                                max_memory=max_memory)
    shuffled = score_embeddings(embeddings[order], labels[order], retrieval=search,
                                references=None if references is None else references[order],
                                max_memory=max_memory)
    _shuffled_alike(straight, shuffled, order)
    assert shuffled.map_at_r == pytest.approx(straight.map_at_r, abs=1e-12)


@pytest.mark.parametrize("backend", ["faiss", "torch"])
def test_identical_embeddings_score_chance_whatever_the_row_order(backend):
    from bgbias.retrieval.search import faiss_available

    if backend == "faiss" and not faiss_available():
        pytest.skip("faiss is not installed")
    labels = np.sort(np.random.default_rng(0).integers(0, 12, 24))
    chance = chance_per_query(labels)
    for rows in (np.arange(24), np.random.default_rng(2).permutation(24)):
        scores = score_embeddings(np.ones((24, 4)), labels[rows], retrieval=ExactL2(backend))
        for name in METRICS:
            np.testing.assert_allclose(scores.per_query[name], chance[name][rows], rtol=0, atol=1e-12)


def test_a_tie_group_past_the_first_search_is_searched_again_until_it_ends():
    # 300 images: a class of 3 among 297 others, all 300 on one point but 10 far ones.
    embeddings = np.zeros((300, 2), dtype=np.float32)
    embeddings[-10:] = 5.0
    labels = np.concatenate([[0, 0, 0], np.arange(1, 298)])
    asked = Asked(ExactL2("torch"))
    scores = score_embeddings(embeddings, labels, retrieval=asked)
    assert asked.ks[0] == 3 and asked.ks[1:] == [6, 12, 24, 48, 96, 192, 299]
    # each of the class's three ties with the 289 other images on the point: chance among those 289 + 1
    assert scores.per_query["precision_at_1"][:3] == pytest.approx([2 / 289] * 3)


def test_a_retrieval_without_distances_is_scored_as_ranking_strictly():
    class IndicesOnly:
        approximate = False

        def neighbours(self, state, k, references=None, queries=None):
            return ExactL2("torch").neighbours(state, k, references, queries=queries)

        def describe(self) -> str:
            return "indices only"

    embeddings, labels = _random_split(0, 11, 300, tied=False)
    assert score_embeddings(embeddings, labels, retrieval=IndicesOnly()) == score_embeddings(
        embeddings, labels, retrieval=ExactL2("torch"))
