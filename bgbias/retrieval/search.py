"""Exact k-nearest-neighbour searches over one split, every item a query and every other item a reference.

A search may also take ``references``: the same images in another form (a clean gallery for corrupted
queries), row ``i`` the query's own image, which is left out just as the query itself is in a search of one
set.

The paper's numbers come from pytorch-metric-learning's ``AccuracyCalculator`` with the whole split as both
query and reference (docs/design.md, *Retrieval and metrics*): faiss ``IndexFlatL2`` (exact squared L2) asked
for ``k + 1`` neighbours, from which each row's own index is removed, or, when ties pushed the row's own index
out of the ``k + 1``, its last column. Both backends here apply that rule, so scores equal PML's on the same
embeddings. The torch backend is the fallback where faiss is not installed; it ranks by the same float32
distances.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from bgbias.errors import AssetError, OptionError
from bgbias.retrieval.state import named_arrays, state_length, take_rows

if TYPE_CHECKING:
    from torch import Tensor

BACKENDS = ("auto", "faiss", "torch")

FAISS_GPU_MAX_K = 2048
"""Largest k faiss's GPU indexes search (CUDA >= 9.5); PML falls back to the CPU above it, and so do we."""

CHUNK_ELEMENTS = 1 << 26
"""Distance-matrix entries per block of the torch backend (256 MiB of float32), whatever the split's size."""

DEFAULT_REFERENCE_ROWS = 16_384
"""References per block of the torch backend; larger splits are streamed through the running top-k."""

Distance = Callable[[Any, Any], "Tensor"]
"""``(queries, references) -> (q, r)`` distances, smaller for more alike, between two sets of per-image
state in the form the model returns it (a (n, D) tensor, or a mapping of names to (n, …) tensors)."""


@dataclass(frozen=True)
class Ranking:
    """Each query's ``k`` nearest other items: ``indices`` ``(n, k)``, nearest first, and the ``distances``
    they were ranked by (``(n, k)`` float32, as the search computed them), from which scoring reads ties by
    exact equality (docs/design.md, *Ties*); None from a retrieval that gives only indices, whose order
    scoring then takes as strict."""

    indices: np.ndarray
    distances: np.ndarray | None


def nearest_neighbours(
    embeddings: np.ndarray | Tensor,
    k: int,
    *,
    backend: str = "auto",
    distance: Distance | None = None,
    references: np.ndarray | Tensor | None = None,
    queries: np.ndarray | None = None,
) -> np.ndarray:
    """The indices of :func:`ranking`."""
    return ranking(embeddings, k, backend=backend, distance=distance, references=references,
                   queries=queries).indices


def ranking(
    embeddings: np.ndarray | Tensor,
    k: int,
    *,
    backend: str = "auto",
    distance: Distance | None = None,
    references: np.ndarray | Tensor | None = None,
    queries: np.ndarray | None = None,
) -> Ranking:
    """``(N, D)`` embeddings -> each row's ``k`` nearest other rows, nearest first, with their distances.

    Ranked by squared L2 distance, or by ``distance`` when given (a learned similarity such as AVSL's, which
    only the torch backend can compute). ``backend`` is ``"faiss"``, ``"torch"`` or ``"auto"`` (faiss when it
    can be imported and no ``distance`` is given, else torch). With ``references`` (as many rows), each row is
    searched among them instead, its own row ``i`` left out. ``queries`` (indices) searches for those rows
    only: ``(len(queries), k)``.
    """
    if backend not in BACKENDS:
        raise OptionError(f"unknown retrieval backend {backend!r}", fix=f"use one of {', '.join(BACKENDS)}")
    if distance is not None:
        if backend == "faiss":
            raise OptionError("faiss ranks by L2 distance only, not by a learned distance",
                              fix="use the torch (or auto) backend for methods with a learned similarity")
        return torch_ranking(embeddings, k, distance=distance, references=references, queries=queries)
    if backend == "auto":
        backend = "faiss" if faiss_available() else "torch"
    if backend == "faiss":
        return faiss_ranking(embeddings, k, references=references, queries=queries)
    return torch_ranking(embeddings, k, references=references, queries=queries)


def checked_k(
    embeddings: np.ndarray | Tensor | Mapping[str, Any],
    k: int,
    references: np.ndarray | Tensor | Mapping[str, Any] | None = None,
) -> int:
    """``k`` as a Python int, once the per-image state is known to hold finite numbers, one row per item,
    and more rows than ``k`` (each row needs ``k`` others). A bare array must be 2-D (items, dimensions).
    ``references``, where given, must be a state of the same images: as many rows, the same arrays."""
    if not isinstance(embeddings, Mapping) and len(embeddings.shape) != 2:
        raise OptionError(
            f"embeddings must be a 2-D (items, dimensions) array, got shape {tuple(embeddings.shape)}",
            fix="pass one embedding vector per row",
        )
    count = state_length(named_arrays(embeddings))
    if references is not None:
        arrays, reference_arrays = named_arrays(embeddings), named_arrays(references)
        shapes = {name: tuple(array.shape[1:]) for name, array in arrays.items()}
        reference_shapes = {name: tuple(array.shape[1:]) for name, array in reference_arrays.items()}
        if state_length(reference_arrays) != count or shapes != reference_shapes:
            raise OptionError(
                f"the references ({state_length(reference_arrays)} images, arrays {reference_shapes}) are "
                f"not the queries' images in another form ({count} images, arrays {shapes})",
                fix="pass a reference state of the same images, in the same order, from the same model",
            )
    if not 0 <= k < count:
        raise OptionError(
            f"cannot find {k} nearest neighbours among the {count - 1} other items of {count}",
            fix="use a k between 0 and the number of items minus one",
        )
    return int(k)


def faiss_available() -> bool:
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


def remove_self_matches(found: Ranking, items: np.ndarray | None = None) -> Ranking:
    """Each query's ``k + 1`` nearest of items ``items`` (default rows ``0 … N-1``) -> its ``k`` nearest
    without its own index (and that column's distance).

    A row whose own index is missing (ties put other items in its place) loses its last column instead: the
    rule of PML's ``return_results`` since v1.5.2.
    """
    indices, distances = found.indices, found.distances
    own = indices == (np.arange(len(indices)) if items is None else np.asarray(items))[:, None]
    own[~own.any(axis=1), -1] = True
    shape = (len(indices), indices.shape[1] - 1)
    kept = None if distances is None else distances[~own].reshape(shape)
    return Ranking(indices[~own].reshape(shape), kept)


def faiss_nearest_neighbours(
    embeddings: np.ndarray | Tensor, k: int, *, references: np.ndarray | Tensor | None = None,
    queries: np.ndarray | None = None,
) -> np.ndarray:
    """The indices of :func:`faiss_ranking`."""
    return faiss_ranking(embeddings, k, references=references, queries=queries).indices


def faiss_ranking(
    embeddings: np.ndarray | Tensor, k: int, *, references: np.ndarray | Tensor | None = None,
    queries: np.ndarray | None = None,
) -> Ranking:
    """The faiss backend: ``IndexFlatL2`` over float32 copies, on every GPU faiss sees (faiss-gpu built for a
    machine with CUDA devices), else on the CPU; the GPU index serves ``k + 1`` up to
    :data:`FAISS_GPU_MAX_K`, beyond which the CPU one does, as in PML. ``references`` are indexed instead of
    the queries where given; ``queries`` (indices) are the rows searched for (default all)."""
    k = checked_k(embeddings, k, references)
    try:
        import faiss
    except ImportError:
        raise AssetError(
            "the faiss retrieval backend was asked for, but faiss is not installed",
            fix="pip install faiss-cpu (or faiss-gpu), or use the torch backend",
        ) from None
    vectors = as_float32_numpy(embeddings)
    index = faiss.IndexFlatL2(vectors.shape[1])
    if faiss.get_num_gpus() > 0 and k + 1 <= FAISS_GPU_MAX_K:
        index = faiss.index_cpu_to_all_gpus(index)
    index.add(vectors if references is None else as_float32_numpy(references))
    items = None if queries is None else np.asarray(queries, dtype=np.int64)
    searched = vectors if items is None else np.ascontiguousarray(vectors[items])
    distances, indices = index.search(searched, k + 1)
    return remove_self_matches(Ranking(np.asarray(indices, dtype=np.int64), np.asarray(distances)), items)


def as_float32_numpy(embeddings: np.ndarray | Tensor) -> np.ndarray:
    if hasattr(embeddings, "detach"):
        embeddings = embeddings.detach().cpu().numpy()
    return np.ascontiguousarray(embeddings, dtype=np.float32)


def torch_nearest_neighbours(
    embeddings: np.ndarray | Tensor | Mapping[str, Any],
    k: int,
    *,
    distance: Distance | None = None,
    device: Any = None,
    query_rows: int | None = None,
    reference_rows: int | None = None,
    queries: np.ndarray | None = None,
    references: np.ndarray | Tensor | Mapping[str, Any] | None = None,
) -> np.ndarray:
    """The indices of :func:`torch_ranking`."""
    return torch_ranking(embeddings, k, distance=distance, device=device, query_rows=query_rows,
                         reference_rows=reference_rows, queries=queries, references=references).indices


def torch_ranking(
    embeddings: np.ndarray | Tensor | Mapping[str, Any],
    k: int,
    *,
    distance: Distance | None = None,
    device: Any = None,
    query_rows: int | None = None,
    reference_rows: int | None = None,
    queries: np.ndarray | None = None,
    references: np.ndarray | Tensor | Mapping[str, Any] | None = None,
) -> Ranking:
    """The torch backend: exact distances, block by block, with a streaming top-``k + 1`` per query.

    ``queries`` (indices into the split) searches for those items only, each against the whole split (a
    sample to check an approximate search against); by default every item is a query. ``references`` (the
    same images in another form) are searched instead of the split itself, each query's own row left out.

    ``distance(queries, references) -> (q, r)`` ranks the items (smaller is nearer); the default is the
    squared L2 distance in float32. ``embeddings`` may be a mapping of named per-image arrays, whose row
    blocks ``distance`` then gets as mappings. A block is ``query_rows`` queries against ``reference_rows``
    references (by default about :data:`CHUNK_ELEMENTS` entries), so memory stays bounded whatever the
    split's size: each query keeps only its ``k + 1`` nearest so far. Runs on ``device`` (default: where the
    arrays are), without gradients.
    """
    import torch

    k = checked_k(embeddings, k, references)
    named = isinstance(embeddings, Mapping)

    def on_device(state: Any) -> dict[str, Any]:
        return {name: torch.as_tensor(a).detach().to(device) for name, a in named_arrays(state).items()}

    arrays = on_device(embeddings)
    gallery = arrays if references is None else on_device(references)
    if distance is None:
        if named:
            raise OptionError("named per-image arrays need the distance that compares them",
                              fix="pass the model's pairwise distance")
        arrays = {name: array.to(torch.float32) for name, array in arrays.items()}
        gallery = {name: array.to(torch.float32) for name, array in gallery.items()}
        distance = squared_l2
    count = state_length(arrays)
    on = next(iter(arrays.values())).device

    def rows(start: int, stop: int) -> Any:
        block = take_rows(gallery, slice(start, stop))
        return block if named else next(iter(block.values()))

    if reference_rows is None:
        reference_rows = max(1, min(count, DEFAULT_REFERENCE_ROWS))
    if query_rows is None:
        query_rows = max(1, CHUNK_ELEMENTS // max(reference_rows, 1))
    if query_rows < 1 or reference_rows < 1:
        raise OptionError(f"block sizes must be at least 1, got {query_rows} x {reference_rows}",
                          fix="pass positive query_rows and reference_rows")
    items = np.arange(count) if queries is None else np.asarray(queries, dtype=np.int64)
    parts, part_distances = [], []
    with torch.inference_mode():
        for q_start in range(0, len(items), query_rows):
            chosen = items[q_start:q_start + query_rows]
            block_queries = _rows_at(arrays, chosen, named)
            size = len(chosen)
            best_d = torch.full((size, 0), float("inf"), device=on)
            best_i = torch.zeros((size, 0), dtype=torch.int64, device=on)
            for r_start in range(0, count, reference_rows):
                block = distance(block_queries, rows(r_start, r_start + reference_rows)).to(torch.float32)
                ids = torch.arange(r_start, r_start + block.shape[1], device=on).expand(size, -1)
                block_d, block_i = smallest(block, ids, k + 1)
                best_d, best_i = smallest(torch.cat([best_d, block_d], dim=1),
                                          torch.cat([best_i, block_i], dim=1), k + 1)
            parts.append(best_i.cpu())
            part_distances.append(best_d.cpu())
    found = Ranking(torch.cat(parts).numpy().astype(np.int64), torch.cat(part_distances).numpy())
    return remove_self_matches(found, items)


def smallest(distances: Tensor, ids: Tensor, count: int) -> tuple[Tensor, Tensor]:
    """Each row's ``count`` smallest ``distances`` and their ``ids``, ordered by distance and, among equal
    distances, by id, as faiss orders them.

    ``torch.topk`` breaks ties as it pleases, and differently for different k; here the smaller id wins, so a
    query's first neighbours are the same whatever k it is searched for and however the references are
    split into blocks. ``torch.topk`` has no cap on k (faiss's GPU index stops at :data:`FAISS_GPU_MAX_K`).
    """
    if count >= distances.shape[1]:
        return _by_distance_then_id(distances, ids)
    top_d, at = distances.topk(count, dim=1, largest=False, sorted=False)
    top_i = ids.gather(1, at)
    # Rows where more items than fit tie with the last one kept: topk chose among them at random.
    cut = top_d.max(dim=1, keepdim=True).values
    tied = ((distances <= cut).sum(dim=1) > count).nonzero().squeeze(1)
    if len(tied):
        tied_d, tied_i = _by_distance_then_id(distances[tied], ids[tied])
        top_d[tied], top_i[tied] = tied_d[:, :count], tied_i[:, :count]
    return _by_distance_then_id(top_d, top_i)


def _by_distance_then_id(distances: Tensor, ids: Tensor) -> tuple[Tensor, Tensor]:
    """Each row sorted by distance, equal distances by id."""
    by_id = ids.argsort(dim=1)
    distances, ids = distances.gather(1, by_id), ids.gather(1, by_id)
    by_distance = distances.argsort(dim=1, stable=True)
    return distances.gather(1, by_distance), ids.gather(1, by_distance)


def _rows_at(arrays: dict[str, Any], indices: np.ndarray, named: bool) -> Any:
    import torch

    block = take_rows(arrays, torch.from_numpy(indices).to(next(iter(arrays.values())).device))
    return block if named else next(iter(block.values()))


def squared_l2(queries: Tensor, references: Tensor) -> Tensor:
    """(q, r) squared Euclidean distances, ``|a|² + |b|² − 2 a·b`` clamped at 0 (what faiss ranks by)."""
    distances = (queries * queries).sum(dim=1)[:, None] + (references * references).sum(dim=1)[None, :]
    return distances.addmm_(queries, references.T, alpha=-2.0).clamp_min_(0.0)
