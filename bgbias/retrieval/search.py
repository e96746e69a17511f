"""Exact k-nearest-neighbour searches over one split, every item a query and every other item a reference
(with ``references``, row ``i`` is the query's own image in another form and is left out likewise).

Both backends (faiss, torch where faiss is missing) drop each row's own index from ``k + 1`` neighbours, or
the last column where ties pushed it out, as pytorch-metric-learning's ``AccuracyCalculator`` does, so scores
equal the paper's on the same embeddings (docs/design.md, *Retrieval and metrics*).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from bgbias.errors import AssetError, OptionError
from bgbias.retrieval.state import named_arrays, state_length, take_rows

if TYPE_CHECKING:
    from torch import Tensor

BACKENDS = ("auto", "faiss", "torch")

FAISS_GPU_MAX_K = 2048
"""Largest k faiss's GPU indexes search (CUDA >= 9.5); PML falls back to the CPU above it, and so do we."""

CHUNK_ELEMENTS = 1 << 28
"""Distance-matrix entries per block of the torch backend (1 GiB of float32), whatever the split's size:
fewer, larger matrix products (a quarter of this size cost 10 % more on 2 CPU cores at 250,000 images)."""

MIN_QUERY_ROWS = 1024
"""Fewest queries per block of the torch backend by default: a block then holds every reference up to
``CHUNK_ELEMENTS / MIN_QUERY_ROWS`` (262,144) of them, and one top-k per query block is all the ranking
costs; larger splits are streamed through a running top-k, in blocks of that many references."""

Distance = Callable[[Any, Any], "Tensor"]
"""``(queries, references) -> (q, r)`` distances, smaller for more alike, between two sets of per-image
state in the form the model returns it (a (n, D) tensor, or a mapping of names to (n, …) tensors)."""


@dataclass(frozen=True)
class Ranking:
    """Each query's ``k`` nearest other items: ``indices`` ``(n, k)``, nearest first, and the ``distances``
    they were ranked by (``(n, k)`` float32, as the search computed them), from which scoring reads ties by
    exact equality (docs/design.md, *Ties*); None from a retrieval that gives only indices, whose order
    scoring then takes as strict.

    Both are numpy arrays, or torch tensors where the search ran (a GPU): scoring then scores there, and
    only the per-query scores travel to the host."""

    indices: np.ndarray | Tensor
    distances: np.ndarray | Tensor | None

    def on_host(self) -> Ranking:
        """The same ranking as numpy arrays (int64 indices)."""
        if isinstance(self.indices, np.ndarray):
            return self
        distances = None if self.distances is None else self.distances.cpu().numpy()
        return Ranking(self.indices.cpu().numpy().astype(np.int64, copy=False), distances)


def nearest_neighbours(
    embeddings: np.ndarray | Tensor,
    k: int,
    *,
    backend: str = "auto",
    distance: Distance | None = None,
    references: np.ndarray | Tensor | None = None,
    queries: np.ndarray | None = None,
) -> np.ndarray:
    """The indices of :func:`ranking`, on the host."""
    return ranking(embeddings, k, backend=backend, distance=distance, references=references,
                   queries=queries).on_host().indices


def ranking(
    embeddings: np.ndarray | Tensor,
    k: int,
    *,
    backend: str = "auto",
    distance: Distance | None = None,
    references: np.ndarray | Tensor | None = None,
    queries: np.ndarray | None = None,
    device: Any = None,
) -> Ranking:
    """``(N, D)`` embeddings -> each row's ``k`` nearest other rows, nearest first, with their distances.

    Ranked by squared L2 distance, or by ``distance`` when given (a learned similarity such as AVSL's, which
    only the torch backend can compute). ``backend`` is ``"faiss"``, ``"torch"`` or ``"auto"``
    (:func:`chosen_backend`). With ``references`` (as many rows), each row is searched among them instead,
    its own row ``i`` left out. ``queries`` (indices) searches for those rows only: ``(len(queries), k)``.
    The torch backend searches on ``device`` (default: where the embeddings are), and its ranking stays
    there.
    """
    if backend not in BACKENDS:
        raise OptionError(f"unknown retrieval backend {backend!r}", fix=f"use one of {', '.join(BACKENDS)}")
    if distance is not None:
        if backend == "faiss":
            raise OptionError("faiss ranks by L2 distance only, not by a learned distance",
                              fix="use the torch (or auto) backend for methods with a learned similarity")
        return torch_ranking(embeddings, k, distance=distance, references=references, queries=queries,
                             device=device)
    if chosen_backend(backend, k, device if device is not None else getattr(embeddings, "device", None)) \
            == "faiss":
        return faiss_ranking(embeddings, k, references=references, queries=queries)
    return torch_ranking(embeddings, k, references=references, queries=queries, device=device)


def chosen_backend(backend: str, k: int, device: Any = None) -> str:
    """What ``backend`` means for a search of ``k`` neighbours whose data is on ``device``: ``"auto"`` is
    faiss where it is installed and can search there (the CPU; a GPU only with faiss-gpu, and only up to
    :data:`FAISS_GPU_MAX_K`, beyond which faiss would search on the CPU), else torch on that device."""
    if backend != "auto":
        return backend
    if not faiss_available():
        return "torch"
    on_accelerator = device is not None and str(device) != "cpu"
    if on_accelerator:
        import faiss

        if faiss.get_num_gpus() == 0 or k + 1 > FAISS_GPU_MAX_K:
            return "torch"
    return "faiss"


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
    rule of PML's ``return_results`` since v1.5.2. Numpy or torch, as ``found`` is.
    """
    on_host = isinstance(found.indices, np.ndarray)
    indices = torch.as_tensor(found.indices)
    distances = None if found.distances is None else torch.as_tensor(found.distances)
    rows = torch.from_numpy(np.arange(len(indices)) if items is None else np.asarray(items, dtype=np.int64))
    rows = rows.to(indices.device)
    width = indices.shape[1] - 1
    if len(rows) and bool((indices[:, 0] == rows).all()):  # each its own nearest: the usual
        kept = Ranking(indices[:, 1:], None if distances is None else distances[:, 1:])
    else:
        own = indices == rows[:, None]
        dropped = torch.where(own.any(dim=1), own.byte().argmax(dim=1), width)
        columns = torch.arange(width, device=indices.device)
        taken = columns + (columns >= dropped[:, None])
        kept = Ranking(indices.gather(1, taken), None if distances is None else distances.gather(1, taken))
    return kept.on_host() if on_host else kept


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
    """The torch backend: exact distances, block by block, with a streaming top-``k + 1`` per query, so memory
    stays bounded whatever the split's size; on ``device`` (default: where the arrays are), without gradients.

    ``queries`` and ``references`` are as for :func:`ranking`. ``distance(queries, references) -> (q, r)``
    (smaller is nearer; default squared L2 in float32) gets row blocks as mappings where ``embeddings`` is
    one. A block is ``query_rows`` × ``reference_rows`` (default about :data:`CHUNK_ELEMENTS` entries)."""
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
    l2 = distance is None
    count = state_length(arrays)

    def rows(state: dict[str, Any], at: Any) -> Any:
        block = take_rows(state, at)
        return block if named else next(iter(block.values()))

    if reference_rows is None:
        reference_rows = max(1, min(count, CHUNK_ELEMENTS // MIN_QUERY_ROWS))
    if query_rows is None:
        query_rows = max(1, CHUNK_ELEMENTS // max(reference_rows, 1))
    if query_rows < 1 or reference_rows < 1:
        raise OptionError(f"block sizes must be at least 1, got {query_rows} x {reference_rows}",
                          fix="pass positive query_rows and reference_rows")
    items = np.arange(count) if queries is None else np.asarray(queries, dtype=np.int64)
    parts, part_distances = [], []
    with torch.inference_mode():
        # Squared L2's norms, computed once for all blocks.
        gallery_norms = squared_norms(rows(gallery, slice(0, count))) if l2 else None
        for q_start in range(0, len(items), query_rows):
            chosen = items[q_start:q_start + query_rows]
            block_queries = rows(arrays, torch.from_numpy(chosen).to(next(iter(arrays.values())).device))
            query_norms = squared_norms(block_queries) if l2 else None
            best: tuple[Tensor, Tensor] | None = None
            for r_start in range(0, count, reference_rows):
                references_block = rows(gallery, slice(r_start, r_start + reference_rows))
                if l2:
                    block = _norms_minus_products(block_queries, references_block, query_norms,
                                                  gallery_norms[r_start:r_start + reference_rows])
                else:
                    block = distance(block_queries, references_block).to(torch.float32)
                nearest = smallest(block, r_start, k + 1, at_least=0.0 if l2 else None)
                best = nearest if best is None else _merged(best, nearest, k + 1)
            parts.append(best[1])
            part_distances.append(best[0])
    found = Ranking(torch.cat(parts), torch.cat(part_distances))
    return remove_self_matches(found, items)


def smallest(distances: Tensor, first_id: int, count: int,
             at_least: float | None = None) -> tuple[Tensor, Tensor]:
    """Each row's ``count`` smallest ``distances`` and their ids (column ``j`` is id ``first_id + j``),
    ordered by distance and, among equal distances, by id, as faiss orders them.

    ``torch.topk`` breaks ties as it pleases, and differently for different k; here the smaller id wins, so a
    query's first neighbours are the same whatever k it is searched for and however the references are
    split into blocks. ``torch.topk`` has no cap on k (faiss's GPU index stops at :data:`FAISS_GPU_MAX_K`).
    ``at_least`` raises every distance below it to it (squared L2's 0, which rounding can undershoot for
    near-duplicates); raising only the candidates ranks as raising every distance would, since it keeps
    their order, and spares a pass over the block.
    """
    rows, columns = distances.shape
    if count >= columns:
        ids = torch.arange(first_id, first_id + columns, device=distances.device).expand(rows, -1)
        return _sorted(distances, ids, at_least)
    # One more than asked: where it equals the last one kept, more items tie there than fit, and topk chose
    # among them at random; those rows take every item at or below that distance, in id order.
    top_d, at = distances.topk(count + 1, dim=1, largest=False, sorted=False)
    top_d, top_i = _sorted(top_d, at + first_id, at_least)
    tied = (top_d[:, count] == top_d[:, count - 1]).nonzero().squeeze(1)
    top_d, top_i = top_d[:, :count], top_i[:, :count]
    if len(tied):
        # As many as the row with most such items has (another row's extras are farther: past its count).
        rows_d = _raised(distances[tied], at_least)
        within = int((rows_d <= top_d[tied, count - 1:count]).sum(dim=1).max())
        near_d, near_at = rows_d.topk(within, dim=1, largest=False, sorted=False)
        near_d, near_i = _sorted(near_d, near_at + first_id, at_least)
        top_d[tied], top_i[tied] = near_d[:, :count], near_i[:, :count]
    return top_d, top_i


def _raised(distances: Tensor, at_least: float | None) -> Tensor:
    return distances if at_least is None else distances.clamp_min(at_least)


def _sorted(distances: Tensor, ids: Tensor, at_least: float | None) -> tuple[Tensor, Tensor]:
    """:func:`_by_distance_then_id` of distances raised to ``at_least``."""
    return _by_distance_then_id(_raised(distances, at_least), ids, at_least is not None and at_least >= 0)


def _merged(best: tuple[Tensor, Tensor], block: tuple[Tensor, Tensor], count: int) -> tuple[Tensor, Tensor]:
    """The ``count`` nearest of two lists of (distances, ids) of the same queries, ordered as
    :func:`smallest` orders them."""
    distances, ids = _by_distance_then_id(torch.cat([best[0], block[0]], dim=1),
                                          torch.cat([best[1], block[1]], dim=1))
    return distances[:, :count], ids[:, :count]


def _by_distance_then_id(distances: Tensor, ids: Tensor,
                         non_negative: bool = False) -> tuple[Tensor, Tensor]:
    """Each row of float32 ``distances`` sorted by distance, equal distances by id (``0 <= id < 2**32``), in
    one sort of a key that orders as the pair does: the float's bits made monotone (a negative float's
    other bits reversed; ``-0.0`` made ``0.0``, which it equals) above the id. Both come back out of the
    sorted key. ``non_negative`` distances' bits are monotone already."""
    bits = (distances + 0.0).view(torch.int32)
    if not non_negative:
        bits = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    keys = (bits.long() << 32 | ids).sort(dim=1).values
    bits = (keys >> 32).int()
    if not non_negative:
        bits = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    return bits.view(torch.float32), keys & 0xFFFFFFFF


def squared_l2(queries: Tensor, references: Tensor) -> Tensor:
    """(q, r) squared Euclidean distances, ``|a|² + |b|² − 2 a·b`` clamped at 0 (what faiss ranks by)."""
    return _norms_minus_products(queries, references, squared_norms(queries),
                                 squared_norms(references)).clamp_min_(0.0)


def _norms_minus_products(queries: Tensor, references: Tensor, query_norms: Tensor,
                          reference_norms: Tensor) -> Tensor:
    """``|a|² + |b|² − 2 a·b`` from the rows' :func:`squared_norms`; rounding can leave it just below 0 for
    near-duplicates."""
    distances = query_norms[:, None] + reference_norms[None, :]
    return distances.addmm_(queries, references.T, alpha=-2.0)


def squared_norms(rows: Tensor) -> Tensor:
    """Each row's squared length."""
    return (rows * rows).sum(dim=1)
