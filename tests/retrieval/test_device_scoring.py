"""Scoring where the search ran: a torch search keeps its neighbour lists on its device, scoring scores them
there, and the numbers are the faiss path's (the same bits on the CPU; ranks and values to 1e-6 on CUDA)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bgbias.errors import BgbiasError
from bgbias.retrieval.metrics import METRICS, retrieval_scores, score_embeddings
from bgbias.retrieval.retrievers import ExactL2, LearnedDistance
from bgbias.retrieval.search import (
    FAISS_GPU_MAX_K,
    Ranking,
    _by_distance_then_id,
    chosen_backend,
    faiss_available,
    nearest_neighbours,
    remove_self_matches,
    squared_l2,
    torch_ranking,
)
from bgbias.retrieval.state import state_length

needs_faiss = pytest.mark.skipif(not faiss_available(), reason="faiss is not installed")


def _tied_set(count: int = 900, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Small-integer embeddings, whose squared distances every search computes exactly (so faiss and torch
    see the same ties), with exact ties and duplicates at many distances, in classes of very different
    sizes."""
    rng = np.random.default_rng(seed)
    labels = np.concatenate([np.zeros(count // 3, dtype=np.int64), rng.integers(1, 60, count - count // 3)])
    embeddings = rng.integers(-4, 5, size=(count, 3)).astype(np.float32)
    return embeddings, labels


def _equal(a, b) -> None:
    for name in (*METRICS, "r"):
        np.testing.assert_array_equal(a.per_query[name], b.per_query[name])
    np.testing.assert_array_equal(a.neighbours, b.neighbours)


@needs_faiss
@pytest.mark.parametrize("ceiling", [1 << 30, 1])
@pytest.mark.parametrize("gallery", [False, True])
def test_scores_of_a_torch_search_equal_the_faiss_paths_bit_for_bit(ceiling, gallery):
    embeddings, labels = _tied_set()
    references = embeddings + 1 if gallery else None
    on_host = score_embeddings(embeddings, labels, retrieval=ExactL2("faiss"), references=references,
                               max_memory=ceiling)
    on_device = score_embeddings(torch.from_numpy(embeddings), labels,
                                 retrieval=ExactL2("torch", device="cpu"), references=references,
                                 max_memory=ceiling)
    _equal(on_host, on_device)


def test_a_torch_search_keeps_its_ranking_on_its_device_and_the_public_indices_on_the_host():
    embeddings, _ = _tied_set(count=200)
    found = torch_ranking(embeddings, 5)
    assert isinstance(found.indices, torch.Tensor) and found.indices.dtype == torch.int64
    host = found.on_host()
    assert isinstance(host.indices, np.ndarray) and host.indices.dtype == np.int64
    assert host.distances.dtype == np.float32
    np.testing.assert_array_equal(nearest_neighbours(embeddings, 5, backend="torch"), host.indices)
    assert isinstance(ExactL2("torch").neighbours(embeddings, 5), np.ndarray)


def test_retrieval_scores_take_tensors_and_give_what_numpy_arrays_give():
    rng = np.random.default_rng(3)
    knn_labels = rng.integers(0, 3, size=(50, 12))
    query_labels, r = rng.integers(0, 3, size=50), rng.integers(0, 12, size=50)
    distances = np.sort(np.round(rng.random((50, 12)), 1), axis=1).astype(np.float32)
    from_numpy = retrieval_scores(knn_labels, query_labels, r, distances)
    from_torch = retrieval_scores(*(torch.from_numpy(a) for a in (knn_labels, query_labels, r, distances)))
    for name in (*METRICS, "r"):
        np.testing.assert_array_equal(from_numpy.per_query[name], from_torch.per_query[name])


def test_removing_the_query_itself_gives_the_same_on_the_host_and_in_torch():
    indices = np.array([[0, 4, 2], [3, 1, 0], [1, 4, 2], [7, 6, 5]])  # row 3 lacks its own index
    distances = np.arange(12, dtype=np.float32).reshape(4, 3)
    host = remove_self_matches(Ranking(indices, distances))
    device = remove_self_matches(Ranking(torch.from_numpy(indices), torch.from_numpy(distances)))
    assert isinstance(device.indices, torch.Tensor)
    assert host.indices.tolist() == device.indices.tolist() == [[4, 2], [3, 0], [1, 4], [7, 6]]
    assert host.distances.tolist() == device.distances.tolist() == [[1, 2], [3, 5], [6, 7], [9, 10]]
    first = np.array([[0, 4, 2], [1, 3, 0]])  # each row's own index first: the columns after it
    assert remove_self_matches(Ranking(first, None)).indices.tolist() == [[4, 2], [3, 0]]


def test_equal_distances_go_in_id_order_across_signs_and_signed_zeros():
    distances = torch.tensor([[0.5, -1.0, 0.5, -0.0, 0.0, -2.5, 3e-39, -3e-39, 1.0]])
    ids = torch.tensor([[5, 1, 2, 9, 3, 7, 8, 6, 0]])
    ordered, their_ids = _by_distance_then_id(distances, ids)
    assert their_ids.tolist() == [[7, 1, 6, 3, 9, 8, 2, 5, 0]]
    assert ordered[0].tolist() == sorted(distances[0].tolist()) and ordered.dtype == torch.float32


@needs_faiss
def test_auto_searches_with_faiss_on_the_cpu_and_with_torch_on_a_gpu_faiss_cannot_use(monkeypatch):
    import faiss

    assert chosen_backend("auto", 10, None) == chosen_backend("auto", 10, "cpu") == "faiss"
    assert chosen_backend("torch", 10, "cpu") == "torch" and chosen_backend("faiss", 10, "cuda") == "faiss"
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 0)
    assert chosen_backend("auto", 10, "cuda:0") == "torch"
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1)
    assert chosen_backend("auto", 10, "cuda:0") == "faiss"
    assert chosen_backend("auto", FAISS_GPU_MAX_K, "cuda:0") == "torch"  # k + 1 past faiss's GPU cap


def test_the_finite_check_survives_a_sum_that_overflows_and_still_catches_nan():
    huge = np.full((4, 2), 3e38, dtype=np.float32)  # finite, though their sum is not
    assert state_length({"embedding": huge}) == 4
    assert state_length({"embedding": torch.from_numpy(huge)}) == 4
    for bad in (np.nan, np.inf):
        array = huge.copy()
        array[2, 1] = bad
        for form in (array, torch.from_numpy(array)):
            with pytest.raises(BgbiasError, match="NaN or infinite"):
                state_length({"embedding": form})


@pytest.mark.cuda
@pytest.mark.parametrize("learned", [False, True])
def test_scoring_on_cuda_ranks_as_the_cpu_does_with_values_within_1e_6(learned):
    rng = np.random.default_rng(5)
    labels = np.concatenate([np.zeros(700, dtype=np.int64), rng.integers(1, 200, 3300)])
    embeddings = rng.normal(size=(4000, 32)).astype(np.float32)
    cuda = torch.device("cuda")
    if learned:
        retrievals = [LearnedDistance(lambda q, r: squared_l2(q, r).sqrt(), device=d) for d in ("cpu", cuda)]
    else:
        retrievals = [ExactL2("torch", device="cpu"), ExactL2("auto", device=cuda)]
    on_cpu = score_embeddings(embeddings, labels, retrieval=retrievals[0])
    on_gpu = score_embeddings(embeddings, labels, retrieval=retrievals[1], max_memory=1 << 22)
    np.testing.assert_array_equal(on_cpu.neighbours, on_gpu.neighbours)
    for name in METRICS:
        np.testing.assert_allclose(on_gpu.per_query[name], on_cpu.per_query[name], rtol=0, atol=1e-6)
