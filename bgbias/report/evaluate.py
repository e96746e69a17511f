"""The paper's measurement: a model's MAP@R on a clean split and on fixed corrupted repeats, and its report.

The clean split is embedded once and every corrupted repeat once, each through the embedding cache, then every
set is ranked against itself by the model's own retrieval (faiss by default, a learned distance in bounded
blocks where the model has one) and scored per query. The corrupted sets are the shared manifests of
``bgbias corrupt`` (``corrupted/<dataset>/<split>/seed-S``), made on first use, so every method and
checkpoint meets exactly the same backgrounds. The report (JSON, CSV, Markdown, plots, a retrieval gallery)
goes to ``<model home>/eval/<measured>-<split>/`` (a run's folder for runs bgbias trained).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bgbias.engine.device import loader_workers, model_memory_format, precision_name
from bgbias.engine.request import (
    MeasureRequest,
    chosen_split,
    measured_geometry,
    requested_split,
    split_protocol,
)
from bgbias.engine.split_states import EVAL_FOLDER, SplitStates
from bgbias.errors import PARAMETER, OptionError
from bgbias.fileio import folder_lock
from bgbias.installation import installation

if TYPE_CHECKING:
    from bgbias.data.items import Dataset
    from bgbias.methods.embedding_model import EmbeddingModel
    from bgbias.report.evaluation import EvaluationReport
    from bgbias.retrieval.metrics import RetrievalScores
    from bgbias.retrieval.retrievers import Retrieval

GALLERY_QUERIES = 4
GALLERY_NEIGHBOURS = 5


@dataclass
class EvaluationResult:
    """Scores of the clean set and of each corrupted repeat, the report (typed: ``report.clean.map_at_r``, as
    ``report.json`` reads back) and where its files are (None: the report was not written, e.g. precomputed
    embeddings without an output folder)."""

    out_dir: Path | None
    report: EvaluationReport
    files: dict[str, Path]
    clean: RetrievalScores
    corrupted: list[RetrievalScores]
    embedded: int
    """Sets embedded now (the others came from the cache)."""
    ids: list[str]
    labels: np.ndarray

    def per_query(self) -> dict[str, list[Any]]:
        """The per-query table by column (``per_query.csv``): id, label, R, each metric clean and per
        corrupted repeat; ``pandas.DataFrame(result.per_query())`` where pandas is at hand. The per-class
        table is ``report.per_class``, the profile's rows ``report.profile.sets``."""
        from bgbias.report.evaluation import per_query_table

        return per_query_table(self.clean, self.corrupted, self.labels, self.ids)

    def summary(self) -> str:
        """What ``bgbias eval`` prints: clean vs corrupted per metric, the drop, and where the report is."""
        from bgbias.report.console import format_evaluation_summary

        return format_evaluation_summary(self.report, self.files)


def evaluate(
    model: EmbeddingModel,
    request: MeasureRequest | None = None,
    *,
    log: Callable[[str], None] = print,
    write: bool = True,
) -> EvaluationResult:
    """Score ``model`` on the split ``request`` names (default: :func:`~bgbias.engine.request.chosen_split`'s,
    the test split of the dataset it was trained on for a run), clean and, with ``request.corrupted``, on
    ``request.repeats`` background-replaced copies fixed by
    ``request.seed``; with ``request.profile`` also its background-reliance profile
    (:mod:`bgbias.report.profile`), whose worst case takes the first ``request.worst_k`` copies.

    The masks (default ``masks/<dataset>``) and backgrounds (default ``./backgrounds``; the test pool is its
    ``test/``) feed the corrupted sets, whose manifests live in ``request.manifests`` (default the shared
    ``corrupted/<dataset>/<split>/seed-<seed>``) and are made there when missing (in memory instead inside
    :func:`~bgbias.corrupted.manifest_store.manifests_in_memory`).

    Without ``write`` nothing goes to disk: no embedding cache, no report folder; the result holds it all
    (``out_dir`` None).
    """
    from bgbias.data.eval_images import EvalImages
    from bgbias.data.memory import InMemoryImage
    from bgbias.report.evaluation import evaluation_record, summarize_evaluation
    from bgbias.report.evaluation_sets import evaluation_sets
    from bgbias.report.profile import score_sets, summarize_profile
    from bgbias.retrieval.metrics import MAX_MEMORY
    from bgbias.retrieval.retrievers import ShortlistRerank, with_shortlist

    request = request or MeasureRequest()
    split, split_reason = chosen_split(model, request)
    request = dataclasses.replace(request, split=split)
    if request.profile and request.worst_k < 1:
        raise OptionError(f"the worst case needs at least one background per query, not {request.worst_k}",
                          fix=f"pass {PARAMETER}1 or more", parameter="worst_k")
    dataset, items = requested_split(model, request)
    trained_on = model.trained_on()
    protocol, fold = split_protocol(trained_on)
    retrieval = with_shortlist(model.retrieval(), request.shortlist)
    geometry = measured_geometry(model, dataset.name)
    masks_in_memory = any(isinstance(item.saliency_mask, InMemoryImage) for item in items)
    states = SplitStates(model, dataset.name, items, geometry, batch_size=request.batch_size,
                         workers=request.workers, progress=request.progress, log=log,
                         on_disk=write and not masks_in_memory)  # such masks have no file to key a cache by
    labels = states.labels
    sets = evaluation_sets(dataset, items, request, protocol, fold, geometry)

    clean_images = EvalImages(items, geometry)
    recalls: list[Any] = []  # the clean split's, then each corrupted repeat's

    def shortlist_recall(state: dict[str, np.ndarray]) -> None:
        recalls.append(retrieval.recall(state, labels))
        if len(recalls) == 1:
            log(f"shortlist recall of the exact top-R: {recalls[0].recall} over {recalls[0].queries} clean "
                "queries")

    # A background swap moves L2 neighbours too: the shortlist may miss more on the corrupted sets.
    hooks = {"on_clean": shortlist_recall, "on_corrupted": shortlist_recall} if isinstance(
        retrieval, ShortlistRerank) else {}
    scored = score_sets(states, sets, retrieval, request, log, request.max_memory or MAX_MEMORY, **hooks)
    clean, corrupted_scores, query_side = scored.clean, scored.corrupted, scored.query_side
    variant_scores = scored.variants
    recall = recalls[0] if recalls else None
    corrupted_recalls = [value.recall for value in recalls[1:]]

    identity = dataset.identity()
    measured = measured_label(dataset, request, retrieval)
    meta = {
        **model.describe(),
        "dataset": dataset.name,
        "measured": measured,
        "dataset_identity": identity,
        "same_dataset_as_training": None if trained_on is None or trained_on.identity is None
        else trained_on.identity == identity,
        "split": split,
        "split_reason": split_reason,
        "protocol": protocol,
        "fold": fold,
        "geometry": geometry.as_dict(),
        "retrieval": retrieval.describe(),
        "compute": {"device": str(model.device), "precision": precision_name(model.amp),
                    "memory_format": model_memory_format(model),
                    "loader_workers": loader_workers(request.workers, model.device)},
        "installation": installation(),
    }
    if retrieval.approximate:
        meta["approximate"] = True
    if recall is not None:
        measured_recalls = [value for value in corrupted_recalls if value is not None]
        meta["shortlist_recall"] = {
            **recall.as_dict(),
            "corrupted_recall_of_exact_top_r": float(np.mean(measured_recalls)) if measured_recalls else None,
        }
    if sets.corrupted:
        meta["corrupted_sets"] = sets.corrupted_meta(request)
    ids = [item.id for item in items]
    report = summarize_evaluation(clean, corrupted_scores, labels, ids, meta,
                                  class_names=dataset.class_names(), empty_masks=sets.empty_masks)
    if request.profile:
        report["profile"] = summarize_profile(clean, corrupted_scores, query_side, variant_scores, labels,
                                              sets.variants, sets.worst_case_manifests(request))
    record = evaluation_record(report)
    if not write:
        return EvaluationResult(None, record, {}, clean, corrupted_scores, states.embedded, ids, labels)
    out_dir = Path(model.home) / EVAL_FOLDER / f"{measured}-{split}"
    # Another evaluation of this model into this folder (other repeats, clean only) writes its whole report
    # after this one's instead of among its files.
    with folder_lock(out_dir):
        files = write_evaluation_folder(report, record, out_dir, clean, corrupted_scores, labels, ids,
                                        clean_images, [images for _, images in sets.corrupted])
    return EvaluationResult(out_dir, record, files, clean, corrupted_scores, states.embedded, ids, labels)


def measured_label(dataset: Dataset, request: MeasureRequest, retrieval: Retrieval | None = None) -> str:
    """What an evaluation measured, as its report folder and table columns name it: the dataset's key, and
    for corrupted sets the masks folder (``exact-masks`` for the shipped masks in their default folder),
    background pool and seed wherever they are not the defaults, and an
    approximate retrieval's shortlist, so two datasets, pools, mask models, seeds or searches never write
    over each other's report."""
    from bgbias.data.items import default_masks_dir
    from bgbias.paths import backgrounds_root, located_key
    from bgbias.saliency.ground_truth import default_ground_truth_dir

    parts = [dataset.key]
    if request.corrupted or request.profile:
        masks, backgrounds = request.masks, request.backgrounds
        if masks is not None and Path(masks).resolve() == default_ground_truth_dir(dataset).resolve():
            parts.append("exact-masks")
        elif masks is not None and Path(masks).resolve() != default_masks_dir(dataset).resolve():
            parts.append(located_key("masks", masks))
        if backgrounds is not None and Path(backgrounds).resolve() != backgrounds_root().resolve():
            parts.append(located_key("bg", backgrounds))
        if request.seed != 0:
            parts.append(f"seed{request.seed}")
    if retrieval is not None and retrieval.approximate:
        parts.append(f"shortlist{request.shortlist}")
    return "-".join(parts)


# ------------------------------------------------------------------------------------------------ helpers
def write_evaluation_folder(
    report: dict[str, Any],
    record: EvaluationReport,
    out_dir: Path,
    clean: RetrievalScores,
    corrupted: list[RetrievalScores],
    labels: np.ndarray,
    ids: list[str],
    clean_images: Any,
    corrupted_images: list[Any],
) -> dict[str, Path]:
    """The report folder (``report.json`` from ``report``, the rest from its typed ``record``), replacing the
    one of an earlier evaluation whole (:mod:`bgbias.report.folder`): a clean-only evaluation after a
    corrupted one keeps none of its files, and a failed one leaves it as it was."""
    from bgbias.report.evaluation import write_evaluation_report
    from bgbias.report.folder import EVAL_REPORT_FILES, write_report_folder
    from bgbias.report.plots import plot_clean_vs_corrupted, plot_per_class_drop, plot_profile

    def write(stage: Path) -> dict[str, Path]:
        files = write_evaluation_report(report, stage, clean=clean, corrupted=corrupted, labels=labels,
                                        ids=ids)
        if record.profile is not None:
            files["profile"] = plot_profile(record, stage / "profile.png")
        if corrupted:
            files["bars"] = plot_clean_vs_corrupted(record, stage / "clean-vs-corrupted.png")
            files["per_class_drop"] = plot_per_class_drop(record, stage / "per-class-drop.png")
            files["gallery"] = _retrieval_gallery(stage / "retrieval-gallery.png", clean, corrupted[0],
                                                  labels, clean_images, corrupted_images[0])
        return files

    return write_report_folder(out_dir, write, EVAL_REPORT_FILES)


def _retrieval_gallery(
    path: Path, clean: RetrievalScores, corrupted: RetrievalScores, labels: np.ndarray, clean_images: Any,
    corrupted_images: Any,
) -> Path:
    """The paper's Fig. 1 for the queries whose AP@R fell most in the first corrupted repeat."""
    from bgbias.retrieval.gallery import GalleryQuery, GalleryRow, write_retrieval_gallery

    drop = np.nan_to_num(clean.per_query["map_at_r"] - corrupted.per_query["map_at_r"], nan=-np.inf)
    picks = np.argsort(-drop, kind="stable")[:GALLERY_QUERIES]
    queries = []
    for q in picks.tolist():
        clean_nn = clean.neighbours[q, :GALLERY_NEIGHBOURS].tolist()
        corrupted_nn = corrupted.neighbours[q, :GALLERY_NEIGHBOURS].tolist()
        queries.append(GalleryQuery(
            caption=f"{clean_images.items[q].id}: AP@R {clean.per_query['map_at_r'][q]:.2f} clean, "
                    f"{corrupted.per_query['map_at_r'][q]:.2f} corrupted",
            rows=(GalleryRow("clean", _pixels(clean_images, q), [_pixels(clean_images, n) for n in clean_nn],
                             [bool(labels[n] == labels[q]) for n in clean_nn]),
                  GalleryRow("corrupted", _pixels(corrupted_images, q),
                             [_pixels(corrupted_images, n) for n in corrupted_nn],
                             [bool(labels[n] == labels[q]) for n in corrupted_nn])),
        ))
    return write_retrieval_gallery(path, queries)


def _pixels(images: Any, index: int) -> np.ndarray:
    """Image ``index`` of an evaluation dataset as uint8 (H, W, 3)."""
    return images[index]["image"].permute(1, 2, 0).numpy()
