"""How a model's images are ranked: one :class:`Retrieval` the model supplies, used alike by validation and
evaluation (as pytorch-metric-learning's ``knn_func``): each image's ``k`` nearest other images, or with
``references`` (corrupted queries against a clean gallery) each query's nearest references but its own image.
:class:`ExactL2` is the default; :class:`LearnedDistance` ranks by the model's own distance, exactly;
:class:`ShortlistRerank` re-ranks an L2 shortlist, approximate, and every report says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from bgbias.errors import OptionError
from bgbias.retrieval.search import (
    Distance,
    Ranking,
    checked_k,
    nearest_neighbours,
    ranking,
    remove_self_matches,
    torch_ranking,
)
from bgbias.retrieval.state import EMBEDDING, model_form, named_arrays, state_length, take_rows


@runtime_checkable
class Retrieval(Protocol):
    """Ranks a set of images against itself from their per-image state."""

    approximate: bool
    """True where a search may miss a nearer item (reports then label their scores approximate)."""

    def ranking(self, state: Any, k: int, references: Any = None,
                queries: np.ndarray | None = None) -> Ranking:
        """Each image's ``k`` nearest other images, nearest first, with the distances they were ranked by
        (scoring reads ties from them: docs/design.md, *Ties*); ``state`` is a ``(N, D)`` array or a mapping
        of names to ``(N, …)`` arrays (numpy or torch). With ``references`` (a state of the same images in
        another form, row ``i`` image ``i``), the images of ``state`` are queries searched among the
        references, each leaving out its own row. ``queries`` (indices) searches for those images only, one
        row each, against all of them: scoring goes through a large set in such blocks of queries, so its
        memory stays bounded."""
        ...

    def neighbours(self, state: Any, k: int, references: Any = None,
                   queries: np.ndarray | None = None) -> np.ndarray:
        """The ``(N, k)`` indices of :meth:`ranking` (the built-in retrievals subclass this protocol for it).
        A retrieval written before rankings had distances has this method only; scoring then takes its order
        as strict (no ties)."""
        return self.ranking(state, k, references, queries).on_host().indices

    def describe(self) -> str:
        """How the images were ranked, as reports state it."""
        ...


@dataclass(frozen=True)
class ExactL2(Retrieval):
    """Exact squared L2 over the array ``key`` of the state, with ``backend`` faiss, torch or auto
    (:func:`~bgbias.retrieval.search.chosen_backend`: faiss where it is installed and searches on
    ``device``, else torch there). ``device`` is where the torch backend searches, and so where scoring
    scores (None: where the embeddings are); a model's retrieval names the model's device."""

    backend: str = "auto"
    key: str = EMBEDDING
    approximate: bool = False
    device: Any = None

    def ranking(self, state: Any, k: int, references: Any = None,
                queries: np.ndarray | None = None) -> Ranking:
        gallery = None if references is None else _array(references, self.key)
        return ranking(_array(state, self.key), k, backend=self.backend, references=gallery, queries=queries,
                       device=self.device)

    def describe(self) -> str:
        return "exact squared L2"


@dataclass(frozen=True)
class LearnedDistance(Retrieval):
    """Exact ranking by ``distance`` (the model's pairwise distance) on ``device``, in blocks of
    ``query_rows`` × ``reference_rows`` (default: about 2**26 entries) so memory stays bounded.

    ``shortlist_key`` names the array an approximate :class:`ShortlistRerank` may shortlist by.
    """

    distance: Distance
    device: Any = None
    query_rows: int | None = None
    reference_rows: int | None = None
    shortlist_key: str = EMBEDDING
    approximate: bool = False

    def ranking(self, state: Any, k: int, references: Any = None,
                queries: np.ndarray | None = None) -> Ranking:
        gallery = None if references is None else model_form(named_arrays(references))
        return torch_ranking(model_form(named_arrays(state)), k, distance=self.distance, device=self.device,
                             query_rows=self.query_rows, reference_rows=self.reference_rows, queries=queries,
                             references=gallery)

    def describe(self) -> str:
        return "learned pairwise distance"


@dataclass(frozen=True)
class ShortlistRecall:
    """An approximate search checked against the exact one: ``recall`` (None without a query that has a
    classmate) over ``queries`` images drawn with ``seed``."""

    recall: float | None
    queries: int
    seed: int

    def as_dict(self) -> dict[str, Any]:
        return {"recall_of_exact_top_r": self.recall, "queries": self.queries, "seed": self.seed}


@dataclass(frozen=True)
class ShortlistRerank(Retrieval):
    """Each image's ``shortlist`` nearest by exact squared L2 over ``exact.shortlist_key``, re-ranked by
    ``exact``'s learned distance; approximate unless the shortlist holds every other image."""

    exact: LearnedDistance
    shortlist: int
    approximate: bool = True

    def __post_init__(self) -> None:
        if self.shortlist < 1:
            raise OptionError(f"a shortlist of {self.shortlist} images is too short",
                              fix="use a shortlist of at least the largest class size")

    def recall(self, state: Any, labels: np.ndarray, *, queries: int = 200, seed: int = 0) -> ShortlistRecall:
        """How much of the exact ranking this search keeps: over up to ``queries`` images drawn with
        ``seed``, the mean fraction of each one's exact top R (R: the other images of its class) that its
        shortlisted top R holds. The exact side is the learned distance against the whole split."""
        labels = np.asarray(labels)
        _, class_of, sizes = np.unique(labels, return_inverse=True, return_counts=True)
        r = sizes[class_of] - 1
        candidates = np.flatnonzero(r > 0)
        chosen = np.sort(np.random.default_rng(seed).permutation(candidates)[:queries])
        if len(chosen) == 0:
            return ShortlistRecall(None, 0, seed)
        k = int(r[chosen].max())
        exact, approximate = (search.neighbours(state, k, queries=chosen) for search in (self.exact, self))
        kept = [len(set(exact[i, :r[q]]) & set(approximate[i, :r[q]])) / r[q] for i, q in enumerate(chosen)]
        return ShortlistRecall(float(np.mean(kept)), len(chosen), seed)

    def ranking(self, state: Any, k: int, references: Any = None,
                queries: np.ndarray | None = None) -> Ranking:
        """The L2 shortlist re-ranked, with its learned distances."""
        k = checked_k(state, k, references)
        queries = np.arange(state_length(named_arrays(state))) if queries is None else np.asarray(queries)
        gallery = state if references is None else references
        key = self.exact.shortlist_key
        size = min(max(self.shortlist, k), len(_array(state, key)) - 1)
        candidates = nearest_neighbours(_array(state, key), size, queries=queries,
                                        references=None if references is None else _array(references, key))

        def on_device(arrays: Any) -> dict[str, Any]:
            return {name: torch.as_tensor(a).to(self.exact.device)
                    for name, a in named_arrays(arrays).items()}

        on, on_gallery = on_device(state), on_device(gallery)
        ranked = np.empty((len(queries), k + 1), dtype=np.int64)
        ranked_distances = np.empty((len(queries), k + 1), dtype=np.float32)
        with torch.inference_mode():
            for row, query in enumerate(queries):
                # The query's own image leads its list, as in the exact searches, so its removal is the same.
                pool = np.concatenate([[query], candidates[row]])
                distances = self.exact.distance(model_form(take_rows(on, slice(query, query + 1))),
                                                model_form(take_rows(on_gallery, torch.from_numpy(pool))))
                row_distances = distances[0].float()
                order = row_distances.argsort(stable=True)[: k + 1]
                ranked[row] = pool[order.cpu().numpy()]
                ranked_distances[row] = row_distances[order].cpu().numpy()
        return remove_self_matches(Ranking(ranked, ranked_distances), queries)

    def describe(self) -> str:
        return (f"a shortlist of {self.shortlist} by exact squared L2 on "
                f"{self.exact.shortlist_key!r}, re-ranked by the learned pairwise distance")


def with_shortlist(retrieval: Retrieval, shortlist: int | None) -> Retrieval:
    """``retrieval`` with an approximate shortlist of ``shortlist`` images (None: unchanged); only a
    learned distance has anything to gain from one."""
    if shortlist is None:
        return retrieval
    if not isinstance(retrieval, LearnedDistance):
        raise OptionError(f"a shortlist only serves a learned distance; this model ranks by "
                          f"{retrieval.describe()}, which is exact and fast already",
                          fix="leave out --shortlist")
    return ShortlistRerank(retrieval, shortlist)


def _array(state: Any, key: str) -> Any:
    arrays = named_arrays(state)
    if key not in arrays:
        raise OptionError(f"the per-image state has no array {key!r} (it has {', '.join(sorted(arrays))})",
                          fix="rank by one of the arrays the model returns")
    return arrays[key]

