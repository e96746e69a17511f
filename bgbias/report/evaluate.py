"""Evaluating a model (``bgbias eval``) or one's own embeddings (``bgbias score --embeddings``): the
measurement (:mod:`bgbias.measurement`), then its report folder, ``<model home>/eval/<measured>-<split>/``
(or, for embeddings, the folder asked for).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bgbias.engine.split_states import EVAL_FOLDER
from bgbias.fileio import folder_lock
from bgbias.measurement.measure import Measurement, measure, measure_files
from bgbias.measurement.request import MeasureRequest
from bgbias.measurement.summary import per_query_table
from bgbias.report.console import format_evaluation_summary
from bgbias.report.evaluation import write_evaluation_report
from bgbias.report.folder import EVAL_REPORT_FILES, refuse_model_folder, write_report_folder
from bgbias.report.plots import plot_clean_vs_corrupted, plot_per_class_drop, plot_profile
from bgbias.retrieval.gallery import GalleryQuery, GalleryRow, write_retrieval_gallery

if TYPE_CHECKING:
    from bgbias.data.items import Dataset
    from bgbias.measurement.record import EvaluationReport
    from bgbias.methods.embedding_model import EmbeddingModel
    from bgbias.retrieval.metrics import RetrievalScores

GALLERY_QUERIES = 4
GALLERY_NEIGHBOURS = 5


@dataclass
class EvaluationResult:
    """Scores of the clean set and of each corrupted repeat, the typed report, and where its files are (None:
    not written)."""

    out_dir: Path | None
    report: EvaluationReport
    files: dict[str, Path]
    clean: RetrievalScores
    corrupted: list[RetrievalScores]
    embedded: int
    """Sets embedded now (the others came from the cache)."""
    ids: list[str]
    labels: np.ndarray
    variants: dict[str, list[RetrievalScores]] = field(default_factory=dict)
    """The profile's variant sets' scores by name (empty without the profile)."""

    def per_query(self) -> dict[str, list[Any]]:
        """The per-query table by column (``per_query.csv``); ``pandas.DataFrame(result.per_query())`` reads
        it."""
        return per_query_table(self.clean, self.corrupted, self.labels, self.ids, variants=self.variants)

    def summary(self) -> str:
        """What ``bgbias eval`` prints: clean vs corrupted per metric, the drop, and where the report is."""
        return format_evaluation_summary(self.report, self.files)


def evaluate(
    model: EmbeddingModel,
    request: MeasureRequest | None = None,
    *,
    log: Callable[[str], None] = print,
    write: bool = True,
) -> EvaluationResult:
    """Score ``model`` on the split ``request`` names (:func:`~bgbias.measurement.measure.measure`: clean, the
    corrupted repeats and the profile it asks for) and write its report folder,
    ``<home>/eval/<measured>-<split>``. Without ``write`` nothing goes to disk: no embedding cache, no report
    folder; the result holds it all (``out_dir`` None)."""
    measured = measure(model, request or MeasureRequest(), log=log, cache=write)
    if not write:
        return _result(None, measured, {})
    report = measured.report
    out_dir = Path(model.home) / EVAL_FOLDER / f"{report.measured}-{report.split}"
    # Another evaluation of this model into this folder (other repeats, clean only) writes its whole report
    # after this one's instead of among its files.
    with folder_lock(out_dir):
        return _result(out_dir, measured, write_evaluation_folder(measured, out_dir))


def score_embedding_folder(
    folder: str | Path,
    dataset: Dataset,
    request: MeasureRequest,
    *,
    protocol: str = "fixed",
    fold: int = 0,
    l2_normalize: bool = False,
    name: str | None = None,
    out: str | Path | None = None,
    log: Callable[[str], None] = print,
) -> EvaluationResult:
    """``bgbias score --embeddings`` (docs/embeddings.md): the embeddings in ``folder`` scored as ``bgbias
    eval`` scores a model's, the same embeddings giving the same report; its files go to ``out`` (none without
    it), which may not lie in a run folder or a model's home."""
    if out is not None:
        refuse_model_folder(Path(out), "the report folder", "a report there",
                            fix="write the report to a folder outside runs and model folders")
    measured = measure_files(Path(folder), dataset, request, protocol=protocol, fold=fold,
                             l2_normalize=l2_normalize, name=name, log=log)
    if out is None:
        return _result(None, measured, {})
    with folder_lock(Path(out)):
        return _result(Path(out), measured, write_evaluation_folder(measured, Path(out)))


def _result(out_dir: Path | None, measured: Measurement, files: dict[str, Path]) -> EvaluationResult:
    return EvaluationResult(out_dir, measured.report, files, measured.clean, measured.corrupted,
                            measured.embedded, measured.ids, measured.labels, measured.variants)


def write_evaluation_folder(measured: Measurement, out_dir: Path) -> dict[str, Path]:
    """The report folder of a measurement, replacing an earlier evaluation's whole
    (:mod:`bgbias.report.folder`)."""
    record, clean, corrupted = measured.report, measured.clean, measured.corrupted

    def write(stage: Path) -> dict[str, Path]:
        files = write_evaluation_report(record, stage, clean=clean, corrupted=corrupted,
                                        labels=measured.labels, ids=measured.ids, variants=measured.variants)
        if record.profile is not None:
            files["profile"] = plot_profile(record, stage / "profile.png")
        if corrupted:
            files["bars"] = plot_clean_vs_corrupted(record, stage / "clean-vs-corrupted.png")
            files["per_class_drop"] = plot_per_class_drop(record, stage / "per-class-drop.png")
            files["gallery"] = _retrieval_gallery(stage / "retrieval-gallery.png", clean, corrupted[0],
                                                  measured.labels, measured.clean_images,
                                                  measured.corrupted_images[0])
        return files

    return write_report_folder(out_dir, write, EVAL_REPORT_FILES)


def _retrieval_gallery(
    path: Path, clean: RetrievalScores, corrupted: RetrievalScores, labels: np.ndarray, clean_images: Any,
    corrupted_images: Any,
) -> Path:
    """The paper's Fig. 1 for the queries whose AP@R fell most in the first corrupted repeat."""
    drop = np.nan_to_num(clean.per_query["map_at_r"] - corrupted.per_query["map_at_r"], nan=-np.inf)
    picks = np.argsort(-drop, kind="stable")[:GALLERY_QUERIES]
    sides = (("clean", clean, clean_images), ("corrupted", corrupted, corrupted_images))
    return write_retrieval_gallery(path, [GalleryQuery(
        caption=f"{clean_images.items[q].id}: AP@R {clean.per_query['map_at_r'][q]:.2f} clean, "
                f"{corrupted.per_query['map_at_r'][q]:.2f} corrupted",
        rows=tuple(GalleryRow.ranked(name, functools.partial(_pixels, images), labels, q,
                                     scores.neighbours[q, :GALLERY_NEIGHBOURS])
                   for name, scores, images in sides),
    ) for q in picks.tolist()])


def _pixels(images: Any, index: int) -> np.ndarray:
    """Image ``index`` of an evaluation dataset as uint8 (H, W, 3)."""
    return images[index]["image"].permute(1, 2, 0).numpy()
