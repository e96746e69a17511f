"""Synthetic retrieval results for the report tests: labels, rankings and the engine's scores of them."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from bgbias.attribution.outputs import ExplainSummary
from bgbias.engine.run_dir import RunDir, write_record
from bgbias.installation import installation
from bgbias.measurement.confidence import evaluation_confidence
from bgbias.measurement.decomposition import MetricDecomposition, decompose
from bgbias.measurement.record import EvaluationReport, evaluation_record
from bgbias.measurement.scoring import QuerySide
from bgbias.measurement.summary import summarize_evaluation, summarize_profile
from bgbias.report.evaluation import write_evaluation_report
from bgbias.retrieval.metrics import METRICS, RetrievalScores, retrieval_scores
from bgbias.variants.variants import VARIANTS

CLASS_SIZES = (4, 3, 5, 2, 1, 3, 2, 4, 2, 3, 5, 2, 3, 2)
"""14 classes, one of them a lone image (no score), so the Markdown's top 10 leaves some out."""


def make_labels(sizes=CLASS_SIZES, seed: int = 0) -> np.ndarray:
    """Class ``c`` (labelled ``10 + c``) with ``sizes[c]`` images, in shuffled order."""
    labels = np.repeat(np.arange(len(sizes)) + 10, sizes)
    return np.random.default_rng(seed).permutation(labels)


def ranked_scores(labels: np.ndarray, same_class_pull: float, seed: int) -> RetrievalScores:
    """Scores of a ranking of every other image by random keys, with same-class images pulled forward by
    ``same_class_pull`` (0: chance retrieval, large: perfect)."""
    rng = np.random.default_rng(seed)
    n = len(labels)
    _, class_of, sizes = np.unique(labels, return_inverse=True, return_counts=True)
    r = sizes[class_of] - 1
    k = int(sizes.max()) - 1
    knn = []
    for i in range(n):
        others = np.delete(np.arange(n), i)
        keys = rng.random(len(others)) - same_class_pull * (labels[others] == labels[i])
        knn.append(others[np.argsort(keys, kind="stable")][:k])
    return retrieval_scores(labels[np.array(knn)], labels, r)


def make_run(
    repeats: int = 3, seed: int = 0, labels: np.ndarray | None = None
) -> tuple[RetrievalScores, list[RetrievalScores], np.ndarray, list[str]]:
    """Clean scores (a good ranking), ``repeats`` corrupted scores (worse rankings), labels and ids."""
    labels = make_labels() if labels is None else labels
    clean = ranked_scores(labels, 0.8, seed)
    corrupted = [ranked_scores(labels, 0.3, seed + 1 + r) for r in range(repeats)]
    return clean, corrupted, labels, [f"img-{i:03d}" for i in range(len(labels))]


def profiled_report(
    clean: RetrievalScores, corrupted: list[RetrievalScores], repasted: list[RetrievalScores],
    labels: np.ndarray, ids: list[str], variants: dict[str, list[RetrievalScores]] | None = None, **meta: Any,
) -> EvaluationReport:
    """The report of these scores with a profile whose paste control scored ``repasted``, every other variant
    the clean scores (:func:`profile_variants`) and the query side the corrupted ones (its worst case the
    first repeat); ``variants`` replaces those of the variants it names."""
    variants = {**profile_variants(clean, repasted), **(variants or {})}
    side = QuerySide(retrieval=None, clean_state={}, labels=labels, repeats=len(corrupted), worst_k=1,
                     max_memory=0, scores=corrupted, worst=dict(corrupted[0].per_query))
    fields = {"method": "m", "dataset": "d", "split": "test", **meta}
    found = evaluation_confidence(clean, corrupted, {"query-side": side.scores, "worst-case": side.worst,
                                                     **variants})
    report = summarize_evaluation(clean, corrupted, labels, ids, fields, confidence=found.headline)
    report["profile"] = summarize_profile(clean, corrupted, side, variants, labels, [], [],
                                          intervals=found.rows, drop=found.drop)
    return evaluation_record(report)


def profile_variants(clean: RetrievalScores,
                     repasted: list[RetrievalScores]) -> dict[str, list[RetrievalScores]]:
    """The variants' scores of :func:`profiled_report`: the paste control's ``repasted``, the clean ones for
    every other variant."""
    return {name: repasted if name == "repasted" else [clean] for name in VARIANTS}


def decomposed(clean: RetrievalScores, corrupted: list[RetrievalScores],
               repasted: list[RetrievalScores]) -> dict[str, MetricDecomposition]:
    """The decomposition of these scores as a report makes it: with the headline's drop."""
    return decompose(clean, corrupted, repasted, drop=evaluation_confidence(clean, corrupted).drop)


def make_report(method: str, bgaugment: bool, dataset: str, *, repeats: int = 3, seed: int = 0,
                split: str = "test", **meta: Any) -> dict[str, Any]:
    """A real report of synthetic scores for the given run identity."""
    clean, corrupted, labels, ids = make_run(repeats, seed)
    run = f"runs/{dataset}-{method}{'-bgaugment' if bgaugment else ''}-{seed}"
    fields: Mapping[str, Any] = {"run": run, "method": method, "bgaugment": bgaugment, "dataset": dataset,
                                 "split": split, **meta}
    return summarize_evaluation(clean, corrupted, labels, ids, fields)


_SCORES = dict.fromkeys(METRICS)
_CLASS_DROP = {"label": 0, "images": 0, "clean_map_at_r": None, "corrupted_map_at_r": None, "drop": None,
               "relative_drop": None}


def complete(partial: Mapping[str, Any]) -> EvaluationReport:
    """A report as ``bgbias report`` reads it back, of the numbers a test sets: what it leaves out is what an
    evaluation that measured nothing else writes (no score, no images)."""
    report = {"format": "bgbias-eval-report", "version": 1, "method": "m", "bgaugment": False,
              "dataset": "bench", "split": "test", "images": 0, "classes": 0, "scored": 0, **partial}
    report["clean"] = {**_SCORES, **partial.get("clean", {})}
    corrupted = partial.get("corrupted")
    if corrupted:
        report["corrupted"] = {"repeats": corrupted.get("repeats", []),
                               "mean": {**_SCORES, **corrupted.get("mean", {})},
                               "std": {**_SCORES, **corrupted.get("std", {})}}
    if partial.get("drop"):
        report["drop"] = {name: {"absolute": None, "relative": None, **drop}
                          for name, drop in partial["drop"].items()}
    report["per_class"] = [{**_CLASS_DROP, **row} for row in partial.get("per_class", [])]
    if isinstance(partial.get("checkpoint"), Mapping):
        report["checkpoint"] = {"path": "best.pt", **partial["checkpoint"]}
    return EvaluationReport.model_validate(report)


def changed(report: EvaluationReport, **fields: Any) -> EvaluationReport:
    """``report`` with ``fields`` replaced, read back as :func:`complete` reads a report."""
    return complete({**report.model_dump(exclude_unset=True), **fields})


def explain_summary(dataset: str, mean: float | None, std: float | None, images: int = 41,
                    **fields: Any) -> ExplainSummary:
    """A ``summary.json`` of ``bgbias explain`` as the tables read it back: SmoothGrad's foreground score of
    ``images`` images of ``dataset``."""
    return ExplainSummary.model_validate({"dataset": dataset, "attribution": "smoothgrad",
                                          "geometry": {"crop": 32}, "images": images, "scored": images,
                                          "mean": mean, "std": std, "installation": installation(), **fields})


def write_evaluation(folder: Path, *, pull: float = 0.8, seed: int = 0, repeats: int = 2,
                     manifests: str = "m", repasted: float | None = None, **meta: Any) -> Path:
    """An evaluation folder (``report.json``, ``per_query.csv``, …) of synthetic scores of the
    :func:`make_labels` queries: a ranking pulled by ``pull`` towards the right class, clean and ``repeats``
    corrupted sets (half the pull), the corrupted sets' manifests named by ``manifests`` (the same name: the
    same sets); with ``repasted``, profiled (:func:`profiled_report`), the paste control's one set pulled by
    ``repasted``."""
    labels = make_labels()
    ids = [f"img-{i:03d}" for i in range(len(labels))]
    clean = ranked_scores(labels, pull, seed)
    corrupted = [ranked_scores(labels, pull / 2, seed + 1 + r) for r in range(repeats)]
    sets = {"seed": 0, "manifests": [{"repeat": r, "path": f"{manifests}/repeat-{r}.json",
                                      "sha256": f"{manifests}-{r}"} for r in range(repeats)]}
    fields = {"method": "m", "dataset": "bench", "split": "test", "corrupted_sets": sets, **meta}
    variants = None
    if repasted is None:
        record = evaluation_record(summarize_evaluation(clean, corrupted, labels, ids, fields))
    else:
        variants = profile_variants(clean, [ranked_scores(labels, repasted, seed + 100)])
        record = profiled_report(clean, corrupted, variants["repasted"], labels, ids, **fields)
    folder.mkdir(parents=True, exist_ok=True)
    write_evaluation_report(record, folder, clean=clean, corrupted=corrupted, labels=labels, ids=ids,
                            variants=variants)
    return folder


def write_run_record(folder: Path, **fields: Any) -> None:
    """A run's ``run.json`` as training writes it (the fields readers check), with ``fields`` set."""
    record = {"status": "finished", "best_epoch": 1, "monitor": "val_map_at_r",
              "installation": installation(),
              "trained_on": {"name": "bench", "root": str(folder), "identity": "0" * 64, "images": 8},
              **fields}
    write_record(RunDir(folder), record)
