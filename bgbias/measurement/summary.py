"""From scores to the typed record of an evaluation (:class:`~bgbias.measurement.record.EvaluationReport`),
checked once against its declared shape (docs/design.md, *Reports*).

Conventions, as in the paper's code: the corrupted value is the mean over repeats ± the sample std
(``ddof=1``, pandas' ``.std()``); queries alone in their class have no score and are left out of every mean.
Images whose mask shows no object are scored as every image is (the paper's number stays the paper's) and
flagged; the headline is given again over the other queries, which keep them in the gallery.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from bgbias.errors import OptionError
from bgbias.installation import installation
from bgbias.measurement.confidence import class_drop_intervals, evaluation_confidence, settings
from bgbias.measurement.decomposition import PASTE_CONTROL, decompose
from bgbias.measurement.intervals import PairedDifference
from bgbias.measurement.mask_sensitivity import mask_sensitivity
from bgbias.measurement.record import (
    COMPUTED_KEYS,
    REPORT_FORMAT,
    EvaluationReport,
    evaluation_record,
)
from bgbias.measurement.variant_columns import variant_order, variant_prefix
from bgbias.retrieval.metrics import METRICS, RetrievalScores, chance_scores
from bgbias.schema import format_header
from bgbias.variants.variants import ONLY_FG_FILL

if TYPE_CHECKING:
    from bgbias.measurement.request import ResolvedRequest
    from bgbias.measurement.scoring import QuerySide, ScoredSets
    from bgbias.measurement.sets import EvaluationSets
    from bgbias.variants.variant_images import VariantImages

HURT_MOST = 10
"""How many classes and images the report lists as hurt most by the background change."""

PROFILE_SETS: dict[str, str] = {
    "clean": "clean",
    "repasted": "repasted (paste control: the object on its own background)",
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


def summarize(
    scored: ScoredSets, sets: EvaluationSets, resolved: ResolvedRequest, source: Mapping[str, Any]
) -> EvaluationReport:
    """The typed report of an evaluation: where its states came from (``source``), what the resolved request
    measured, and the scores of every set in ``scored`` summarised; checked once against its declared shape.
    """
    request, items, dataset, retrieval = (resolved.request, resolved.items, resolved.dataset,
                                          resolved.retrieval)
    meta = {**source, "dataset": dataset.name, "measured": resolved.measured,
            "dataset_identity": dataset.identity(), "split": resolved.split,
            "split_reason": resolved.split_reason, "protocol": resolved.protocol, "fold": resolved.fold,
            "geometry": resolved.geometry.as_dict(), "retrieval": retrieval.describe(),
            "installation": installation()}
    if retrieval.approximate:
        meta["approximate"] = True
    if scored.recalls:
        corrupted = [value.recall for value in scored.recalls[1:] if value.recall is not None]
        meta["shortlist_recall"] = {**scored.recalls[0].as_dict(),
                                    "corrupted_recall_of_exact_top_r": float(np.mean(corrupted)) if corrupted
                                    else None}
    if sets.corrupted:
        meta["corrupted_sets"] = sets.corrupted_meta(request.seed, request.repeats)
    labels = np.array([item.label for item in items], dtype=np.int64)
    side = scored.query_side  # the profile's own sets are resampled with the headline's (one call)
    own = ({"query-side": side.scores, "worst-case": side.worst, **scored.variants} if request.profile
           else None)
    found = evaluation_confidence(scored.clean, scored.corrupted, own)
    report = summarize_evaluation(scored.clean, scored.corrupted, labels, [item.id for item in items], meta,
                                  class_names=dataset.class_names(), empty_masks=sets.empty_masks,
                                  confidence=found.headline)
    if sets.compared is not None:
        report["mask_sensitivity"] = mask_sensitivity(scored.corrupted, scored.compared, sets.masks_dir,
                                                      sets.compared, corrupted_scores(scored.compared),
                                                      [item.id for item in items])
    if request.profile:
        report["profile"] = summarize_profile(
            scored.clean, scored.corrupted, scored.query_side, scored.variants, labels, sets.variants,
            sets.worst_case_manifests(request.repeats, request.worst_k), intervals=found.rows,
            drop=found.drop)
    return evaluation_record(report)


def summarize_evaluation(
    clean: RetrievalScores,
    corrupted: Sequence[RetrievalScores],
    labels: np.ndarray,
    ids: Sequence[str],
    meta: Mapping[str, Any],
    *,
    class_names: Mapping[Any, str] | None = None,
    empty_masks: Collection[str] | None = None,
    confidence: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The report dict of one evaluation: ``meta`` passed through, the clean scores and, with corrupted
    repeats, their scores, mean and std, the drop, the per-class drop and the images hurt most, and how sure
    each is (``confidence``, the hurt-most classes' ``drop_interval``: :mod:`bgbias.measurement.confidence`,
    made as ``intervals`` says; ``confidence`` where the caller made it with the profile's). ``labels`` and
    ``ids`` follow the query order; ``empty_masks`` are the ids of the images whose mask shows no object
    (None: not checked)."""
    labels = np.asarray(labels)
    check_scores(clean, corrupted, labels, ids)
    clashes = sorted(COMPUTED_KEYS & set(meta))
    if clashes:
        raise OptionError(f"the report metadata uses keys the report computes itself: {', '.join(clashes)}",
                          fix="rename those metadata entries")
    report: dict[str, Any] = {
        **format_header(REPORT_FORMAT),
        **meta,
        "images": len(labels),
        "classes": len(np.unique(labels)),
        "scored": clean.scored,
        "clean": metric_means(clean),
        "confidence": (evaluation_confidence(clean, corrupted).headline if confidence is None
                       else dict(confidence)),
        "intervals": settings(),
    }
    if not corrupted:
        return report
    report["corrupted"] = corrupted_scores(corrupted)
    mean = report["corrupted"]["mean"]
    report["drop"] = {name: _drop(report["clean"][name], mean[name]) for name in METRICS}
    names = {} if class_names is None else dict(class_names)
    empty = None if empty_masks is None else _flags(ids, empty_masks)
    report["per_class"] = per_class = _per_class(clean, corrupted, labels, names, empty)
    hurt = [row for row in per_class if row["drop"] is not None][:HURT_MOST]
    for row, interval in zip(hurt, class_drop_intervals(hurt, clean, corrupted, labels), strict=True):
        row["drop_interval"] = interval
    report["images_hurt_most"] = _images_hurt_most(clean, corrupted, labels, ids, names, empty)
    if empty is not None:
        report["empty_masks"] = _empty_masks(clean, corrupted, ids, empty)
    return report


def corrupted_scores(corrupted: Sequence[RetrievalScores]) -> dict[str, Any]:
    """Corrupted repeats' scores as the report keeps them: each repeat's, and their mean and sample std."""
    repeats = [{"repeat": index, **metric_means(scores)} for index, scores in enumerate(corrupted)]
    spread = _row(repeats)
    return {"repeats": repeats, "mean": spread["mean"], "std": spread["std"]}


def check_scores(
    clean: RetrievalScores, corrupted: Sequence[RetrievalScores], labels: np.ndarray, ids: Sequence[str]
) -> None:
    """Every score set must describe the same queries: as many as labels and ids, with the same R each."""
    if labels.ndim != 1 or len(ids) != len(labels):
        raise OptionError(f"expected one label and one id per image, got labels of shape {labels.shape} "
                          f"and {len(ids)} ids", fix="pass a 1-D label array and an id list of equal length")
    for name, scores in [("clean", clean)] + [(f"repeat {i}", s) for i, s in enumerate(corrupted)]:
        r = scores.per_query["r"]
        if len(r) != len(labels) or not np.array_equal(r, clean.per_query["r"]):
            raise OptionError(
                f"the {name} scores cover {len(r)} queries with other class sizes than the clean scores of "
                f"{len(labels)} images",
                fix="score the clean split and every corrupted repeat on the same images, in the same order",
            )


def metric_means(scores: RetrievalScores) -> dict[str, float | None]:
    """Each metric's mean over the scored queries, None where no query was scored (the report's cells)."""
    return {name: finite_or_none(getattr(scores, name)) for name in METRICS}


def finite_or_none(value: float | None) -> float | None:
    """A score as a report keeps it: a float, or None where it is missing or NaN."""
    return None if value is None or math.isnan(value) else float(value)


def _mean(values: Sequence[float | None]) -> float | None:
    return None if not values or None in values else float(np.mean(values))


def _drop(clean: float | None, corrupted: float | None) -> dict[str, float | None]:
    absolute = None if clean is None or corrupted is None else clean - corrupted
    relative = None if absolute is None or clean == 0 else absolute / clean
    return {"absolute": absolute, "relative": relative}


def _per_class(
    clean: RetrievalScores, corrupted: Sequence[RetrievalScores], labels: np.ndarray,
    names: Mapping[Any, str], empty: np.ndarray | None,
) -> list[dict[str, Any]]:
    """MAP@R per class, clean and corrupted (the mean over repeats of the class's mean), largest drop first,
    with the class's name and how many of its images have empty masks; a class of one image has no score and
    goes last."""
    rows = []
    scored = ~np.isnan(clean.per_query["map_at_r"])
    for label in np.unique(labels):
        members = (labels == label) & scored
        clean_value = _nanmean(clean.per_query["map_at_r"][members])
        corrupted_value = _mean([_nanmean(scores.per_query["map_at_r"][members]) for scores in corrupted])
        drop = _drop(clean_value, corrupted_value)
        rows.append({"label": label.item(), "name": names.get(label.item(), str(label)),
                     "images": int((labels == label).sum()),
                     "empty_masks": None if empty is None else int(empty[labels == label].sum()),
                     "clean_map_at_r": clean_value, "corrupted_map_at_r": corrupted_value,
                     "drop": drop["absolute"], "relative_drop": drop["relative"]})
    return sorted(rows, key=lambda row: (row["drop"] is None, -(row["drop"] or 0.0)))


def _flags(ids: Sequence[str], flagged: Collection[str]) -> np.ndarray:
    """Per image, whether its id is among ``flagged``."""
    flagged = set(flagged)
    return np.array([str(image_id) in flagged for image_id in ids], dtype=bool)


def _empty_masks(
    clean: RetrievalScores, corrupted: Sequence[RetrievalScores], ids: Sequence[str], empty: np.ndarray
) -> dict[str, Any]:
    """The images with empty masks by id, and the headline over the other queries (None without any)."""
    flagged = [str(ids[i]) for i in np.flatnonzero(empty)]
    if not flagged:
        return {"images": 0, "ids": [], "without": None}
    kept = ~empty
    clean_means = _subset_means(clean, kept)
    mean = _row([_subset_means(scores, kept) for scores in corrupted])["mean"]
    return {"images": len(flagged), "ids": flagged, "without": {
        "scored": int((kept & ~np.isnan(clean.per_query["map_at_r"])).sum()),
        "clean": clean_means, "corrupted": mean,
        "drop": {name: _drop(clean_means[name], mean[name]) for name in METRICS}}}


def _subset_means(scores: RetrievalScores, kept: np.ndarray) -> dict[str, float | None]:
    """Each metric's mean over the scored queries among ``kept``, None where none is scored."""
    return {name: _nanmean(scores.per_query[name][kept]) for name in METRICS}


def _images_hurt_most(
    clean: RetrievalScores, corrupted: Sequence[RetrievalScores], labels: np.ndarray, ids: Sequence[str],
    names: Mapping[Any, str], empty: np.ndarray | None,
) -> list[dict[str, Any]]:
    """The scored images whose MAP@R fell most (mean over repeats), largest drop first, ties in order."""
    before = clean.per_query["map_at_r"]
    after = np.mean([scores.per_query["map_at_r"] for scores in corrupted], axis=0)
    drop = before - after
    scored = np.flatnonzero(~np.isnan(drop))
    order = scored[np.argsort(-drop[scored], kind="stable")][:HURT_MOST]
    return [{"id": str(ids[i]), "label": labels[i].item(),
             "class_name": names.get(labels[i].item(), str(labels[i])),
             "empty_mask": None if empty is None else bool(empty[i]), "clean_map_at_r": float(before[i]),
             "corrupted_map_at_r": float(after[i]), "drop": float(drop[i])} for i in order]


def per_query_table(
    clean: RetrievalScores, corrupted: Sequence[RetrievalScores], labels: np.ndarray, ids: Sequence[str],
    empty_masks: Collection[str] | None = None,
    variants: Mapping[str, Sequence[RetrievalScores]] | None = None,
) -> dict[str, list[Any]]:
    """The per-query table by column (``per_query.csv``): id, label, R, whether the image's mask is empty
    (with ``empty_masks``), then each metric for the clean set and each repeat (``repeat0_map_at_r``, …), then
    the profile's ``variants`` by name, each draw (``repasted0_map_at_r``, …:
    :mod:`~bgbias.measurement.variant_columns`)."""
    variants = variants or {}
    sets = [("clean", clean), *((f"repeat{i}", scores) for i, scores in enumerate(corrupted)),
            *((variant_prefix(name, draw), scores) for name in variant_order(variants)
              for draw, scores in enumerate(variants[name]))]
    table: dict[str, list[Any]] = {"id": list(ids), "label": labels.tolist(),
                                   "r": clean.per_query["r"].astype(int).tolist()}
    if empty_masks is not None:
        table["empty_mask"] = _flags(ids, empty_masks).tolist()
    for prefix, scores in sets:
        for name in METRICS:
            table[f"{prefix}_{name}"] = [finite_or_none(float(value)) for value in scores.per_query[name]]
    return table


def summarize_profile(
    clean: RetrievalScores,
    corrupted: Sequence[RetrievalScores],
    query_side: QuerySide,
    variants: Mapping[str, Sequence[RetrievalScores]],
    labels: np.ndarray,
    sets: Sequence[VariantImages],
    worst_manifests: Sequence[Mapping[str, Any]],
    *,
    intervals: Mapping[str, Mapping[str, Any]],
    drop: Mapping[str, PairedDifference | None],
) -> dict[str, Any]:
    """The profile as the report keeps it: each of :data:`PROFILE_SETS` in order with its mean and sample std
    over its sets, its ``intervals`` (by row name, as :func:`.confidence.evaluation_confidence` makes them;
    chance has none), the drop (``drop``: the headline's, as records, taken as they are) split by the
    paste control (:func:`~bgbias.measurement.decomposition.decompose`), then how it was made."""
    rows: dict[str, dict[str, Any]] = {"clean": _row([metric_means(clean)]),
                                       "random-bg": _row([metric_means(s) for s in corrupted]),
                                       "query-side": _row([metric_means(s) for s in query_side.scores]),
                                       "worst-case": _row([{name: _nanmean(query_side.worst[name])
                                                            for name in METRICS}])}
    rows["worst-case"]["repeats"] = query_side.worst_k
    for name, scores in variants.items():
        rows[name] = _row([metric_means(s) for s in scores])
    same, other = variants["mixed-same"], variants["mixed-rand"]
    rows["bg-gap"] = _row([{name: _drop(a[name], b[name])["absolute"] for name in METRICS}
                           for a, b in zip(map(metric_means, same), map(metric_means, other), strict=True)])
    rows["chance"] = _row([chance_scores(labels)])
    for name, row in rows.items():
        row.update(intervals.get(name, {"interval": None}))  # chance: no per-query scores
    return {
        # A list, not a mapping: the report's JSON sorts mapping keys, and the order is the reading order.
        "sets": [{"set": name, "title": title, **rows[name]} for name, title in PROFILE_SETS.items()],
        "worst_k": query_side.worst_k,
        "only_fg_fill": list(ONLY_FG_FILL),
        "decomposition": {metric: part.model_dump() for metric, part in decompose(
            clean, corrupted, variants[PASTE_CONTROL], drop=drop).items()},
        "manifests": [
            *({"set": images.manifest.variant.name, "repeat": images.manifest.repeat,
               "path": str(images.manifest.path), "sha256": images.manifest.sha256} for images in sets),
            *worst_manifests,
        ],
    }


def _row(values: Sequence[Mapping[str, float | None]]) -> dict[str, Any]:
    """Mean and sample std over sets of each metric (None where a set has no value, std None for one set)."""
    columns = {name: [value[name] for value in values] for name in METRICS}
    return {"repeats": len(values), "mean": {name: _mean(column) for name, column in columns.items()},
            "std": {name: None if len(column) < 2 or None in column else float(np.std(column, ddof=1))
                    for name, column in columns.items()}}


def _nanmean(values: np.ndarray) -> float | None:
    scored = values[~np.isnan(values)]
    return float(scored.mean()) if len(scored) else None
