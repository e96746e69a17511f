"""The background-reliance profile: how much of a model's retrieval comes from the object, from the
background, and from the background's correlation with the class (``bgbias eval --profile``).

Beside the paper's clean and random-background (both sides) scores, it scores:

- **query-side**: each random-background repeat's corrupted queries against the *clean* split as gallery
  (catalogue photos clean, user photos anywhere), each query's own clean image left out, so R and the
  per-query scores are those of the paper's protocol;
- **worst case**: per query, the lowest score over the first ``worst_k`` random-background repeats
  (``worst_k`` backgrounds of the test pool), query-side, averaged over queries; it costs ``worst_k``
  embeddings of every image, of which the paper's repeats are the first (cached);
- **the variants** of :mod:`bgbias.variants.variants` (only-fg, only-bg tiled, black and inpainted,
  mixed-same, mixed-rand), each a set scored against itself like the paper's corrupted sets, and the
  **BG-gap**, mixed-same − mixed-rand per repeat;
- **chance**: the expected scores of a random ranking, the floor to read only-bg and mixed-rand against.

Every set is a fixed manifest and goes through the model's evaluation cache, so the profile of a model costs
its sets' embedding passes and a few searches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from bgbias.report.evaluation import finite_or_none, metric_means
from bgbias.retrieval.metrics import METRICS, RetrievalScores, chance_scores, score_embeddings

if TYPE_CHECKING:
    from bgbias.engine.request import MeasureRequest
    from bgbias.report.evaluation_sets import EvaluationSets, SetStates
    from bgbias.retrieval.retrievers import Retrieval
    from bgbias.variants.variant_images import VariantImages

PROFILE_SETS: dict[str, str] = {
    "clean": "clean",
    "random-bg": "random backgrounds, both sides (the paper's)",
    "query-side": "random backgrounds, query-side (clean gallery)",
    "worst-case": "worst background per query (query-side)",
    "only-fg": "only-fg (object on black)",
    "only-bg-tiled": "only-bg, tiled",
    "only-bg-black": "only-bg, black",
    "only-bg-inpainted": "only-bg, inpainted",
    "mixed-same": "mixed-same",
    "mixed-rand": "mixed-rand",
    "bg-gap": "BG-gap (mixed-same − mixed-rand)",
    "chance": "chance (random ranking)",
}
"""The profile's rows in report order, with the titles tables give them."""


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


def score_variants(
    states: SetStates,
    sets: Sequence[VariantImages],
    retrieval: Retrieval,
    masks_print: str | None,
    log: Callable[[str], None],
    max_memory: int,
) -> dict[str, list[RetrievalScores]]:
    """Each variant set's state (embedded through the cache, keyed by its manifest's sha256 and the masks; or
    read from files) scored against itself, by variant in repeat order."""
    scores: dict[str, list[RetrievalScores]] = {}
    for images in sets:
        manifest = images.manifest
        key = {"set": manifest.variant.name, "manifest_sha256": manifest.sha256, "masks": masks_print}
        desc = f"{manifest.variant.name} repeat {manifest.repeat}"
        state = states.state(images, key, desc)
        scores.setdefault(manifest.variant.name, []).append(
            score_embeddings(state, states.labels, retrieval=retrieval, max_memory=max_memory))
        log(f"{desc} MAP@R {scores[manifest.variant.name][-1].map_at_r:.4f}")
    return scores


@dataclass(frozen=True)
class ScoredSets:
    """Every set of an evaluation scored: the clean state and scores, the paper's corrupted repeats, the
    query side (empty without the profile) and the variants' scores by name."""

    clean_state: dict[str, np.ndarray]
    clean: RetrievalScores
    corrupted: list[RetrievalScores]
    query_side: QuerySide
    variants: dict[str, list[RetrievalScores]]


def score_sets(
    states: SetStates,
    sets: EvaluationSets,
    retrieval: Retrieval,
    request: MeasureRequest,
    log: Callable[[str], None],
    max_memory: int,
    *,
    on_clean: Callable[[dict[str, np.ndarray]], None] | None = None,
    on_corrupted: Callable[[dict[str, np.ndarray]], None] | None = None,
) -> ScoredSets:
    """Each set of ``sets`` from ``states`` (a model's, or files of embeddings) scored against itself: the
    clean split, the paper's ``request.repeats`` corrupted repeats and, with ``request.profile``, every
    repeat's queries against the clean gallery and the variants. ``on_clean`` sees the clean state once it
    is scored, ``on_corrupted`` each of the paper's repeats' (an approximate retrieval's recall)."""
    labels = states.labels

    def scored(state: dict[str, np.ndarray]) -> RetrievalScores:
        return score_embeddings(state, labels, retrieval=retrieval, max_memory=max_memory)

    clean_state = states.clean()
    clean = scored(clean_state)
    log(f"clean MAP@R {clean.map_at_r:.4f}")
    if on_clean is not None:
        on_clean(clean_state)
    corrupted = []
    query_side = QuerySide(retrieval, clean_state, labels, request.repeats, request.worst_k, max_memory)
    for index, (manifest, images) in enumerate(sets.corrupted):
        key = {"set": "corrupted", "manifest_sha256": manifest.sha256, "masks": sets.masks_print}
        state = states.state(images, key, f"corrupted repeat {manifest.repeat}")
        if index < request.repeats:
            corrupted.append(scored(state))
            log(f"corrupted repeat {manifest.repeat} MAP@R {corrupted[-1].map_at_r:.4f}")
            if on_corrupted is not None:
                on_corrupted(state)
        if request.profile:
            query_map = query_side.add(index, state).map_at_r
            log(f"corrupted repeat {manifest.repeat} query-side MAP@R {query_map:.4f}")
    variants = score_variants(states, sets.variants, retrieval, sets.masks_print, log, max_memory)
    return ScoredSets(clean_state, clean, corrupted, query_side, variants)


def summarize_profile(
    clean: RetrievalScores,
    corrupted: Sequence[RetrievalScores],
    query_side: QuerySide,
    variants: Mapping[str, Sequence[RetrievalScores]],
    labels: np.ndarray,
    sets: Sequence[VariantImages],
    worst_manifests: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """The profile as the report keeps it: for each of :data:`PROFILE_SETS` in order, its name, title, how
    many sets it averages, and the mean and sample std (ddof 1; None for one set) of each metric; then how it
    was made."""
    from bgbias.variants.variants import ONLY_FG_FILL

    rows: dict[str, dict[str, Any]] = {"clean": _row([metric_means(clean)]),
                                       "random-bg": _row([metric_means(s) for s in corrupted]),
                                       "query-side": _row([metric_means(s) for s in query_side.scores]),
                                       "worst-case": _row([{name: _nanmean(query_side.worst[name])
                                                            for name in METRICS}])}
    rows["worst-case"]["repeats"] = query_side.worst_k
    for name, scores in variants.items():
        rows[name] = _row([metric_means(s) for s in scores])
    same, other = variants["mixed-same"], variants["mixed-rand"]
    rows["bg-gap"] = _row([{name: _difference(a, b, name) for name in METRICS}
                           for a, b in zip(same, other, strict=True)])
    rows["chance"] = _row([chance_scores(labels)])
    return {
        # A list, not a mapping: the report's JSON sorts mapping keys, and the order is the reading order.
        "sets": [{"set": name, "title": title, **rows[name]} for name, title in PROFILE_SETS.items()],
        "worst_k": query_side.worst_k,
        "only_fg_fill": list(ONLY_FG_FILL),
        "manifests": [
            *({"set": images.manifest.variant.name, "repeat": images.manifest.repeat,
               "path": str(images.manifest.path), "sha256": images.manifest.sha256} for images in sets),
            *worst_manifests,
        ],
    }


def _row(values: Sequence[Mapping[str, float | None]]) -> dict[str, Any]:
    """Mean and sample std over sets of each metric (None where a set has no value, std None for one set)."""
    def spread(name: str) -> tuple[float | None, float | None]:
        column = [value[name] for value in values]
        if None in column:
            return None, None
        return float(np.mean(column)), float(np.std(column, ddof=1)) if len(column) > 1 else None

    spreads = {name: spread(name) for name in METRICS}
    return {"repeats": len(values), "mean": {name: spreads[name][0] for name in METRICS},
            "std": {name: spreads[name][1] for name in METRICS}}


def _difference(a: RetrievalScores, b: RetrievalScores, name: str) -> float | None:
    first, second = finite_or_none(getattr(a, name)), finite_or_none(getattr(b, name))
    return None if first is None or second is None else first - second


def _nanmean(values: np.ndarray) -> float | None:
    scored = values[~np.isnan(values)]
    return float(scored.mean()) if len(scored) else None

