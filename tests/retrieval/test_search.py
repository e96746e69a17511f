"""Exact kNN without the query itself: known orders, PML's tie rule, agreeing backends, free chunk sizes."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from bgbias.errors import AssetError, BgbiasError, OptionError
from bgbias.retrieval.search import (
    Ranking,
    faiss_ranking,
    nearest_neighbours,
    remove_self_matches,
    torch_ranking,
)

BACKENDS = ["faiss", "torch"]

LINE = np.array([[0.0], [1.0], [3.0], [7.0], [15.0]], dtype=np.float32)
"""Points on a line whose gaps all differ, so every ranking is unique."""
LINE_NEIGHBOURS = np.array([[1, 2], [0, 2], [1, 0], [2, 1], [3, 2]])


def faiss_nearest_neighbours(embeddings: np.ndarray, k: int) -> np.ndarray:
    return faiss_ranking(embeddings, k).indices


def torch_nearest_neighbours(embeddings, k: int, **options) -> np.ndarray:
    return torch_ranking(embeddings, k, **options).on_host().indices


def _untied(seed: int, count: int = 300, dim: int = 8) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(count, dim)).astype(np.float32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_known_order_on_a_line(backend):
    assert np.array_equal(nearest_neighbours(LINE, 2, backend=backend), LINE_NEIGHBOURS)
    assert np.array_equal(nearest_neighbours(LINE, 4, backend=backend)[0], [1, 2, 3, 4])
    assert np.array_equal(nearest_neighbours(LINE, np.int64(2), backend=backend), LINE_NEIGHBOURS)


@pytest.mark.parametrize("backend", BACKENDS)
def test_result_is_int64_with_k_columns_and_never_the_row_itself(backend):
    x = _untied(0, count=50)
    knn = nearest_neighbours(x, 7, backend=backend)
    assert knn.dtype == np.int64 and knn.shape == (50, 7)
    assert not (knn == np.arange(50)[:, None]).any()
    assert all(len(set(row)) == 7 for row in knn.tolist())


@pytest.mark.parametrize("backend", BACKENDS)
def test_k_zero_gives_no_columns(backend):
    assert nearest_neighbours(LINE, 0, backend=backend).shape == (5, 0)


def test_self_is_removed_wherever_it_stands_with_its_distance():
    searched = np.array([[0, 4, 2], [3, 1, 0], [1, 4, 2]])
    distances = np.array([[0, 1, 2], [3, 4, 5], [6, 7, 8]], dtype=np.float32)
    found = remove_self_matches(Ranking(searched, distances))
    assert found.indices.tolist() == [[4, 2], [3, 0], [1, 4]]
    assert found.distances.tolist() == [[1, 2], [3, 5], [6, 7]]


def test_row_without_its_own_index_loses_its_last_column():
    # Row 1 tied with items 0 and 2, which took both places: PML then drops the last column.
    searched = np.array([[0, 1], [0, 2], [2, 1]])
    assert remove_self_matches(Ranking(searched, None)).indices.tolist() == [[1], [0], [1]]


def test_faiss_neighbours_equal_pmls_faiss_knn_with_ties():
    from pytorch_metric_learning.utils.inference import FaissKNN

    rng = np.random.default_rng(3)
    x = rng.integers(0, 3, size=(400, 3)).astype(np.float32)  # 27 distinct points: ties everywhere
    _, theirs = FaissKNN()(torch.from_numpy(x), 9, torch.from_numpy(x), True)
    assert np.array_equal(faiss_nearest_neighbours(x, 9), theirs.numpy())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_torch_backend_equals_faiss_without_ties(seed):
    x = _untied(seed)
    assert np.array_equal(torch_nearest_neighbours(x, 10), faiss_nearest_neighbours(x, 10))


@pytest.mark.parametrize("query_rows", [1, 7, 29, 1000])
@pytest.mark.parametrize("reference_rows", [1, 6, 13, 30])
def test_torch_blocks_do_not_change_the_result(query_rows, reference_rows):
    """Blocks of one row, of sizes that leave a short last block, of the whole set and beyond it: 30 points,
    as many kinds of block as 300 gave, at a 100th of the blocks."""
    x = _untied(4, count=30)
    whole = torch_nearest_neighbours(x, 6, query_rows=len(x), reference_rows=len(x))
    blocked = torch_nearest_neighbours(x, 6, query_rows=query_rows, reference_rows=reference_rows)
    assert np.array_equal(blocked, whole)


def _bilinear(weights: torch.Tensor):
    """A learned-looking, non-metric distance: -(q W r) with an asymmetric W."""
    return lambda queries, references: -(queries @ weights @ references.T)


@pytest.mark.parametrize("reference_rows", [1, 5, 33, 60])
def test_a_learned_distance_ranks_exactly_like_its_full_matrix(reference_rows):
    x = torch.from_numpy(_untied(7, count=60, dim=6))
    weights = torch.from_numpy(_untied(8, count=6, dim=6))
    distance = _bilinear(weights)
    full = distance(x, x).numpy()
    np.fill_diagonal(full, np.inf)
    expected = np.argsort(full, axis=1, kind="stable")[:, :9]
    streamed = torch_nearest_neighbours(x, 9, distance=distance, query_rows=17, reference_rows=reference_rows)
    assert np.array_equal(streamed, expected)
    assert np.array_equal(nearest_neighbours(x, 9, distance=distance), expected)


def test_a_learned_distance_is_not_for_faiss():
    with pytest.raises(OptionError, match="learned"):
        nearest_neighbours(LINE, 1, backend="faiss", distance=_bilinear(torch.ones(1, 1)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensors_are_accepted_like_arrays(backend):
    x = _untied(5, count=40)
    tensor = torch.from_numpy(x).double().requires_grad_()
    from_array = nearest_neighbours(x, 5, backend=backend)
    assert np.array_equal(nearest_neighbours(tensor, 5, backend=backend), from_array)


def test_auto_uses_torch_when_faiss_is_missing_and_faiss_asked_for_is_an_asset_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)  # makes `import faiss` raise ImportError
    x = _untied(6, count=60)
    assert np.array_equal(nearest_neighbours(x, 4), torch_nearest_neighbours(x, 4))
    with pytest.raises(AssetError, match="faiss-cpu"):
        nearest_neighbours(x, 4, backend="faiss")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k", [5, 6, -1])
def test_k_must_leave_room_for_the_query_itself(backend, k):
    with pytest.raises(OptionError, match="nearest neighbours"):
        nearest_neighbours(LINE, k, backend=backend)


def test_bad_inputs_are_bgbias_errors():
    with pytest.raises(OptionError, match="2-D"):
        nearest_neighbours(np.zeros(5, dtype=np.float32), 1)
    with pytest.raises(OptionError, match="backend"):
        nearest_neighbours(LINE, 1, backend="annoy")
    with pytest.raises(OptionError, match="block sizes"):
        torch_nearest_neighbours(LINE, 1, reference_rows=0)
    broken = LINE.copy()
    broken[2, 0] = np.nan
    for backend in BACKENDS:
        with pytest.raises(BgbiasError, match="NaN"):
            nearest_neighbours(broken, 1, backend=backend)
    with pytest.raises(BgbiasError, match="NaN"):
        nearest_neighbours(torch.from_numpy(broken), 1)


@pytest.mark.slow
@pytest.mark.parametrize(("k", "on_gpu"), [(5, True), (2048, False)])
def test_faiss_searches_on_the_gpus_it_sees_up_to_their_k_limit(monkeypatch, k, on_gpu):
    import faiss

    moved = []
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1)
    monkeypatch.setattr(faiss, "index_cpu_to_all_gpus", lambda index: moved.append(index) or index)
    x = _untied(9, count=2100, dim=4)  # more than k=2048 points
    assert np.array_equal(faiss_nearest_neighbours(x, k)[:, :5], torch_nearest_neighbours(x, 5))
    assert bool(moved) == on_gpu
