"""MAP@R, R-precision and P@1 per query, as pytorch-metric-learning's ``AccuracyCalculator`` defines them
(docs/design.md, *Retrieval and metrics*): a query alone in its class has no score and is left out of the
means. Unlike PML, neighbours at exactly equal distances count at their expected value over every order
(docs/design.md, *Ties*), so no score depends on the order of the rows.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from bgbias.errors import OptionError
from bgbias.retrieval.retrievers import ExactL2, Retrieval
from bgbias.retrieval.search import Ranking
from bgbias.retrieval.state import named_arrays, state_length

METRICS = ("map_at_r", "r_precision", "precision_at_1")

MAX_MEMORY = 1 << 30
"""Bytes that scoring's per-query neighbour lists may take at once (1 GiB): a larger set is scored in blocks
of queries, so its memory stays bounded however many images and however large R (a class of 20,000 images
needs 20,000 neighbours for each of its own queries)."""

BYTES_PER_NEIGHBOUR = 112
"""What one retrieved neighbour costs while a block is scored: its index and distance from the search, the
copy without the query's own row, its label, and the rank-wise arrays of :func:`retrieval_scores` (its tie
group's start, end, size and relevant counts among them)."""

MIN_BLOCK = 64
"""The fewest queries of a block, whatever the ceiling: fewer would leave the search's matrix products short
(faiss multiplies blocks of 20 queries or more with BLAS)."""

KEPT_NEIGHBOURS = 8
"""Neighbours of each query a result keeps (for galleries); the rest are dropped block by block."""


@dataclass(frozen=True)
class RetrievalScores:
    """Means over the scored queries (those with ``R >= 1``), and every query's own scores.

    ``per_query`` holds one float array per metric (NaN for lone queries) and ``"r"`` (int), in input order.
    """

    map_at_r: float
    r_precision: float
    precision_at_1: float
    per_query: dict[str, np.ndarray] = field(compare=False, repr=False)
    scored: int
    neighbours: np.ndarray | None = field(default=None, compare=False, repr=False)
    """(N, at most :data:`KEPT_NEIGHBOURS`) indices of each query's nearest other items, nearest first,
    where scores came from a search."""

    def as_dict(self) -> dict[str, Any]:
        """The three means (``None`` when no query was scored: JSON has no NaN) and the scored count."""
        means = {name: getattr(self, name) for name in METRICS}
        return {**{k: (None if np.isnan(v) else float(v)) for k, v in means.items()}, "scored": self.scored}


def retrieval_scores(knn_labels: np.ndarray | Tensor, query_labels: np.ndarray | Tensor,
                     r: np.ndarray | Tensor, distances: np.ndarray | Tensor | None = None) -> RetrievalScores:
    """Scores of queries from their neighbours' labels: each metric's expected value over every order of
    the neighbours tied at one distance (docs/design.md, *Ties*).

    ``knn_labels`` is ``(N, k)``, nearest first; ``query_labels`` and ``r`` (each query's count of relevant
    references) are ``(N,)``. ``k`` must reach the largest ``R``, or MAP@R and R-precision would be cut short.
    ``distances`` (``(N, k)``, what the neighbours were ranked by) groups neighbours at exactly equal
    distances; the group holding a query's R-th neighbour must end within its ``k`` (or hold every other
    item). Without them, the order is taken as strict. Numpy arrays or torch tensors: the scores are
    computed where ``knn_labels`` is (a GPU, say) and returned on the host.
    """
    knn_labels = torch.as_tensor(knn_labels)
    on = knn_labels.device
    query_labels, r = torch.as_tensor(query_labels, device=on), torch.as_tensor(r, device=on).long()
    if (knn_labels.ndim != 2 or query_labels.shape != (len(knn_labels),) or r.shape != query_labels.shape
            or (distances is not None and tuple(distances.shape) != tuple(knn_labels.shape))):
        raise OptionError(
            f"expected (N, k) neighbour labels with N query labels, N R values and (N, k) distances or none, "
            f"got shapes {tuple(knn_labels.shape)}, {tuple(query_labels.shape)}, {tuple(r.shape)} and "
            f"{None if distances is None else tuple(distances.shape)}",
            fix="pass one row of neighbour labels (and of distances), one label and one R per query",
        )
    k = knn_labels.shape[1]
    if len(r) and (r.min() < 0 or r.max() > k):
        raise OptionError(
            f"R ranges over {int(r.min())}..{int(r.max())}, but only {k} neighbours per query were retrieved",
            fix="retrieve at least max(R) neighbours per query (PML's k='max_bin_count')",
        )
    distances = None if distances is None else torch.as_tensor(distances, device=on)
    per_query = per_query_scores(knn_labels, query_labels, r, distances)
    return _scores_of({name: values.cpu().numpy() for name, values in per_query.items()}
                      | {"r": r.cpu().numpy()})


def per_query_scores(knn_labels: Tensor, query_labels: Tensor, r: Tensor,
                     distances: Tensor | None) -> dict[str, Tensor]:
    """:func:`retrieval_scores`'s per-query scores (float64, NaN for ``R = 0``) of checked tensors, on their
    device."""
    count, k = knn_labels.shape
    if k == 0:
        return {name: torch.full((count,), float("nan"), dtype=torch.float64, device=r.device)
                for name in METRICS}
    groups = _tie_groups(knn_labels == query_labels[:, None], distances)
    rows = torch.arange(count, device=r.device)
    # AP@R's rank i adds E[rel(i)·P(i)]: within a group of g holding m relevant items, c relevant before it,
    # at the group's (t+1)-th place, rel(i) = 1 with probability m/g, and then the t places before it in the
    # group hold (m − 1)·t/(g − 1) relevant items on average. Only the ranks below R take part, each query's
    # summed in rank order (a segmented sum: sequential on the CPU, one fixed order on a GPU), so a query's
    # MAP@R has the same bits whatever k its block was searched with, and a large R costs its relevant
    # ranks, not all k.
    taking = (torch.arange(k, device=r.device) < r[:, None]) & (groups.relevant > 0)
    queries, ranks = taking.nonzero(as_tuple=True)
    m = groups.relevant[queries, ranks].double()
    g = groups.size[queries, ranks].double()
    offset = (ranks - groups.start[queries, ranks]).double()
    others = torch.where(g > 1, offset * (m - 1) / (g - 1).clamp_min(1), 0.0)
    gains = (m / g) * ((groups.before[queries, ranks] + 1).double() + others) / (ranks + 1).double()
    sums = torch.segment_reduce(gains, "sum", lengths=taking.sum(dim=1), unsafe=True)
    real_r = r.double()
    map_at_r = sums / real_r
    # The top R hold every group before the R-th's and (R − start)/g of that one's relevant items.
    last = (r - 1).clamp_min(0)
    share = (r - groups.start[rows, last]).double() / groups.size[rows, last].double()
    r_precision = (groups.before[rows, last].double() + groups.relevant[rows, last].double() * share) / real_r
    precision_at_1 = groups.relevant[:, 0].double() / groups.size[:, 0].double()
    per_query = {"map_at_r": map_at_r, "r_precision": r_precision, "precision_at_1": precision_at_1}
    for values in per_query.values():
        values[r == 0] = float("nan")
    return per_query


@dataclass(frozen=True)
class _TieGroups:
    """For each ``(query, rank)`` of a ranking, the group of neighbours at exactly its distance: the rank
    it starts at, its size, the relevant items in it and the relevant items ranked before it."""

    start: Tensor
    size: Tensor
    relevant: Tensor
    before: Tensor


def _tie_groups(same_class: Tensor, distances: Tensor | None) -> _TieGroups:
    """Most neighbours are alone at their distance: their group is their own rank. Only the ranks that tie
    with a neighbour are grouped, along the flat list of them (ascending, so a running maximum of group
    starts, and a reversed running minimum of group ends, never cross from one group into the next)."""
    count, k = same_class.shape
    start = torch.arange(k, device=same_class.device).expand(count, k)
    end = start
    if distances is not None and k > 1:
        as_next = distances[:, 1:] == distances[:, :-1]
        if as_next.any():
            after_tie = torch.zeros_like(same_class)
            after_tie[:, 1:] = as_next
            before_tie = torch.zeros_like(same_class)
            before_tie[:, :-1] = as_next
            tied = (after_tie | before_tie).view(-1).nonzero().squeeze(1)
            first = torch.where(after_tie.view(-1)[tied], 0, tied).cummax(dim=0).values
            last = torch.where(before_tie.view(-1)[tied], tied[-1] + 1, tied).flip(0).cummin(dim=0).values
            last = last.flip(0)
            start, end = start.repeat(1, 1), start.repeat(1, 1)
            start.view(-1)[tied] = first % k
            end.view(-1)[tied] = last % k
    hits = same_class.cumsum(dim=1, dtype=torch.int32)
    before = hits.gather(1, start) - same_class.gather(1, start).int()
    return _TieGroups(start, end - start + 1, hits.gather(1, end) - before, before)


def _scores_of(per_query: dict[str, np.ndarray]) -> RetrievalScores:
    """The means over the scored queries (``R >= 1``) of every query's own scores (``per_query``, with
    ``"r"``)."""
    scored = per_query["r"] > 0
    means = {name: float(per_query[name][scored].mean()) if scored.any() else float("nan")
             for name in METRICS}
    return RetrievalScores(**means, per_query=per_query, scored=int(scored.sum()))


def score_embeddings(
    embeddings: Any,
    labels: np.ndarray | Tensor,
    *,
    retrieval: Retrieval | None = None,
    references: Any = None,
    max_memory: int = MAX_MEMORY,
) -> RetrievalScores:
    """Score a split against itself: every item a query, every other item a reference.

    ``embeddings``: a ``(N, D)`` array, or a mapping of names to ``(N, …)`` arrays. Each query is scored on
    its ``R`` nearest (``R``: its class's size minus one, PML's ``"max_bin_count"``), ranked by ``retrieval``
    (default :class:`~bgbias.retrieval.retrievers.ExactL2`). With ``references`` (the same images in another
    form) ``embeddings`` are the queries and each query's own image is left out: the same R, so scores compare
    query by query. Queries go in blocks whose neighbour lists fit ``max_memory`` bytes
    (:func:`query_blocks`); every score is the same bits whatever the blocks, and tied neighbours count at
    their expected value (docs/design.md, *Ties*)."""
    count = state_length(named_arrays(embeddings))
    labels = labels.detach().cpu().numpy() if hasattr(labels, "detach") else np.asarray(labels)
    if labels.shape != (count,) or len(labels) == 0:
        raise OptionError(
            f"expected one label per embedding, got labels of shape {labels.shape} for {count} embeddings",
            fix="pass a 1-D label array as long as the embeddings, with at least one item",
        )
    _, class_of_item, class_sizes = np.unique(labels, return_inverse=True, return_counts=True)
    r = class_sizes[class_of_item] - 1
    search = retrieval or ExactL2()
    largest = int(class_sizes.max()) - 1
    kept_width = min(KEPT_NEIGHBOURS, largest)
    # An exact search's first k neighbours are the same whatever larger k it is asked for (ties go to the
    # smaller index), so each block asks only for what its queries need, and one more to see whether the
    # R-th's tie group ends within it; an approximate one's candidates may change with k, so it keeps one k
    # for every query. A query whose R-th ties with its last neighbour is searched again for twice as many,
    # until its group ends or it has every other item (docs/design.md, *Ties*).
    need = np.full(count, largest) if search.approximate else np.maximum(r, kept_width)
    asked = np.minimum(need + 1, count - 1)
    per_query = {name: np.empty(count) for name in METRICS} | {"r": r}
    kept = np.empty((count, kept_width), dtype=np.int64)

    @functools.cache
    def on_device(device: torch.device) -> tuple[Tensor, Tensor]:
        """Each item's class index and R on the device a ranking comes from, copied there once."""
        return torch.from_numpy(class_of_item.astype(np.int64)).to(device), torch.from_numpy(r).to(device)

    pending = np.arange(count)
    while len(pending):
        blocks = [pending[block] for block in query_blocks(asked[pending], max_memory)]
        whole = len(blocks) == 1 and len(pending) == count
        again = []
        for queries in blocks:
            k = int(asked[queries].max())
            found = _search(search, embeddings, k, references, None if whole else queries)
            # Scored where the search left its neighbour lists (a GPU): only per-query figures travel.
            indices = torch.as_tensor(found.indices).long()  # numpy arrays as tensors without a copy
            distances = None if found.distances is None else torch.as_tensor(found.distances)
            classes, r_of = on_device(indices.device)
            chosen = torch.from_numpy(queries).to(indices.device)
            done = ~_open_ended(distances, r_of[chosen], count)
            part = per_query_scores(classes[indices[done]], classes[chosen[done]], r_of[chosen[done]],
                                    None if distances is None else distances[done])
            finished = done.cpu().numpy()
            for name in METRICS:
                per_query[name][queries[finished]] = part[name].cpu().numpy()
            kept[queries[finished]] = indices[done, :kept_width].cpu().numpy()
            asked[queries[~finished]] = min(2 * k, count - 1)
            again.append(queries[~finished])
        pending = np.concatenate(again)
    return dataclasses.replace(_scores_of(per_query), neighbours=kept)


def _open_ended(distances: Tensor | None, r: Tensor, count: int) -> Tensor:
    """Which queries' R-th neighbour ties with their last one (so its group may go on past them), short of
    every other of the ``count`` items."""
    if distances is None or distances.shape[1] >= count - 1:
        return torch.zeros(len(r), dtype=torch.bool, device=r.device)
    rows = torch.arange(len(r), device=r.device)
    return (r > 0) & (distances[rows, (r - 1).clamp_min(0)] == distances[:, -1])


def query_blocks(need: np.ndarray, max_memory: int) -> list[np.ndarray]:
    """Blocks of query indices (each in ascending order) whose neighbour lists fit ``max_memory`` bytes,
    ``need[i]`` being the neighbours query ``i`` needs.

    The queries needing most come first, so a block is as large as the ceiling allows for the k of its first
    query, and the many queries of small classes are searched for few neighbours rather than for the largest
    class's R. A block has at least :data:`MIN_BLOCK` queries; a shorter rest joins the block before it.
    """
    count = len(need)
    order = np.argsort(-need, kind="stable")
    blocks, start = [], 0
    while start < count:
        size = max(MIN_BLOCK, max_memory // (BYTES_PER_NEIGHBOUR * (int(need[order[start]]) + 1)))
        stop = count if count - (start + size) < MIN_BLOCK else start + size
        blocks.append(np.sort(order[start:stop]))
        start = stop
    return blocks


def _search(search: Retrieval, embeddings: Any, k: int, references: Any,
            queries: np.ndarray | None) -> Ranking:
    """``search.ranking`` of ``queries`` (None: every item), passing only the arguments in use, so that a
    Retrieval written before references or blocks of queries existed still scores a set that fits; one with
    ``neighbours`` only gives no distances, its order taken as strict."""
    strict = not hasattr(search, "ranking")
    method = search.neighbours if strict else search.ranking
    if queries is not None:
        found = method(embeddings, k, references, queries=queries)
    elif references is None:
        found = method(embeddings, k)
    else:
        found = method(embeddings, k, references)
    return Ranking(np.asarray(found), None) if strict else found


def chance_scores(labels: np.ndarray) -> dict[str, float]:
    """The expected means of the three metrics when every query ranks the other items at random: how well a
    model does that sees nothing of the images, the floor a background-only or object-only score is read
    against (the means of :func:`chance_per_query` over the queries not alone in their class)."""
    per_query = chance_per_query(labels)
    scored = ~np.isnan(per_query["map_at_r"])
    if not scored.any():
        return {name: float("nan") for name in METRICS}
    return {name: float(per_query[name][scored].mean()) for name in METRICS}


def chance_per_query(labels: np.ndarray) -> dict[str, np.ndarray]:
    """Each query's expected scores when it ranks the other items at random (NaN for a query alone in its
    class, left out as everywhere), in input order.

    With ``M`` other items of which ``R`` share the query's class, ``p = R / M``: P@1 and R-precision expect
    ``p``; AP@R expects ``(p / R)·(H_R + (R − H_R)·(R − 1)/(M − 1))`` (``H_R`` the R-th harmonic number),
    since rank ``i`` adds ``P(i)·rel(i)``, whose expectation is ``(p/i)·(1 + (i − 1)(R − 1)/(M − 1))``.
    """
    labels = np.asarray(labels)
    _, class_of, sizes = np.unique(labels, return_inverse=True, return_counts=True)
    r = (sizes[class_of] - 1).astype(np.float64)
    others = len(labels) - 1
    scored = r > 0
    ap = np.full(len(labels), np.nan)
    p = np.full(len(labels), np.nan)
    r = r[scored]
    p[scored] = r / others
    harmonic = np.array([np.sum(1.0 / np.arange(1, int(value) + 1)) for value in r])
    pairs = (r - 1) / (others - 1) if others > 1 else np.zeros_like(r)
    ap[scored] = p[scored] / r * (harmonic + (r - harmonic) * pairs)
    return {"map_at_r": ap, "r_precision": p, "precision_at_1": p.copy()}
