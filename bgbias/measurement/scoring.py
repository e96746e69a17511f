"""Scoring every set of an evaluation: the clean split and the paper's corrupted repeats, each against itself,
and the background-reliance profile's sets (docs/design.md, *The background-reliance profile*).

Every set is a fixed manifest whose state comes from a :class:`~bgbias.measurement.sets.SetStates`, so a
model's profile costs its sets' embedding passes and a few searches. An approximate retrieval's shortlist is
checked against the exact ranking on the clean split and on each of the paper's repeats.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from bgbias.retrieval.metrics import MAX_MEMORY, METRICS, RetrievalScores, score_embeddings
from bgbias.retrieval.retrievers import ShortlistRerank

if TYPE_CHECKING:
    from bgbias.measurement.request import ResolvedRequest
    from bgbias.measurement.sets import EvaluationSets, SetStates
    from bgbias.retrieval.retrievers import Retrieval


@dataclass
class QuerySide:
    """Corrupted queries against the clean gallery: the scores of each of the first ``repeats`` corrupted
    sets, and each query's lowest score over the first ``worst_k``, each scored within ``max_memory``."""

    retrieval: Retrieval
    clean_state: dict[str, np.ndarray]
    labels: np.ndarray
    repeats: int
    worst_k: int
    max_memory: int
    scores: list[RetrievalScores] = field(default_factory=list)
    worst: dict[str, np.ndarray] = field(default_factory=dict)

    def add(self, index: int, state: dict[str, np.ndarray]) -> RetrievalScores:
        """Score corrupted repeat ``index`` query-side, keeping what the profile needs of it."""
        scores = score_embeddings(state, self.labels, retrieval=self.retrieval, references=self.clean_state,
                                  max_memory=self.max_memory)
        if index < self.repeats:
            self.scores.append(scores)
        if index < self.worst_k:  # fmin keeps NaN only where every repeat has it: the lone queries
            self.worst = {name: np.fmin(self.worst[name], scores.per_query[name]) if self.worst
                          else scores.per_query[name].copy() for name in METRICS}
        return scores


@dataclass(frozen=True)
class ScoredSets:
    """Every set of an evaluation scored: the clean state and scores, the paper's corrupted repeats, the
    query side (empty without the profile), the variants' scores by name, an approximate retrieval's
    recall of the exact top-R (clean, then per corrupted repeat; empty for an exact one), and the paper's
    repeats cut out with the second masks (empty without them)."""

    clean_state: dict[str, np.ndarray]
    clean: RetrievalScores
    corrupted: list[RetrievalScores]
    query_side: QuerySide
    variants: dict[str, list[RetrievalScores]]
    recalls: list[Any]
    compared: list[RetrievalScores] = field(default_factory=list)


def score_sets(
    states: SetStates, sets: EvaluationSets, resolved: ResolvedRequest, log: Callable[[str], None]
) -> ScoredSets:
    """Each set of ``sets`` from ``states`` (a model's, or files of embeddings) scored against itself by the
    resolved request's retrieval, and with the profile each repeat's queries against the clean gallery."""
    request, retrieval, labels = resolved.request, resolved.retrieval, states.labels
    max_memory = request.max_memory or MAX_MEMORY
    recalls: list[Any] = []

    def shortlist_recall(state: dict[str, np.ndarray]) -> None:
        # A background swap moves L2 neighbours too: the shortlist may miss more on the corrupted sets.
        if isinstance(retrieval, ShortlistRerank):
            recalls.append(retrieval.recall(state, labels))
            if len(recalls) == 1:
                log(f"shortlist recall of the exact top-R: {recalls[0].recall} over {recalls[0].queries} "
                    "clean queries")

    def scored(state: dict[str, np.ndarray]) -> RetrievalScores:
        return score_embeddings(state, labels, retrieval=retrieval, max_memory=max_memory)

    clean_state = states.clean()
    clean = scored(clean_state)
    log(f"clean MAP@R {clean.map_at_r:.4f}")
    shortlist_recall(clean_state)
    corrupted = []
    query_side = QuerySide(retrieval, clean_state, labels, request.repeats, request.worst_k, max_memory)
    for index, (manifest, images) in enumerate(sets.corrupted):
        key = {"set": "corrupted", "manifest_sha256": manifest.sha256, "masks": sets.masks_print}
        state = states.state(images, key, f"corrupted repeat {manifest.repeat}")
        if index < request.repeats:
            corrupted.append(scored(state))
            log(f"corrupted repeat {manifest.repeat} MAP@R {corrupted[-1].map_at_r:.4f}")
            shortlist_recall(state)
        if request.profile:
            query_map = query_side.add(index, state).map_at_r
            log(f"corrupted repeat {manifest.repeat} query-side MAP@R {query_map:.4f}")
    # Each variant set by its name, in repeat order (its state keyed by its manifest and the masks).
    variants: dict[str, list[RetrievalScores]] = {}
    for images in sets.variants:
        name, manifest = images.manifest.variant.name, images.manifest
        desc = f"{name} repeat {manifest.repeat}"
        key = {"set": name, "manifest_sha256": manifest.sha256, "masks": sets.masks_print}
        variants.setdefault(name, []).append(scored(states.state(images, key, desc)))
        log(f"{desc} MAP@R {variants[name][-1].map_at_r:.4f}")
    # The paper's repeats again with the second masks: keyed by those masks, never the first's embeddings.
    compared, second = [], sets.compared
    for manifest, images in [] if second is None else second.corrupted:
        key = {"set": "corrupted", "manifest_sha256": manifest.sha256, "masks": second.masks_print}
        desc = f"corrupted repeat {manifest.repeat}, second masks"
        compared.append(scored(states.state(images, key, desc)))
        log(f"corrupted repeat {manifest.repeat} with the second masks MAP@R {compared[-1].map_at_r:.4f}")
    return ScoredSets(clean_state, clean, corrupted, query_side, variants, recalls, compared)
