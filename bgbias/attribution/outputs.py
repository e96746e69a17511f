"""The files of an explanation folder: their names, writing them (scores, summary, maps, gallery) and
reading them back (the summaries of a run's finished explanations)."""

from __future__ import annotations

import csv
import io
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from bgbias.attribution.heatmap import attribution_gallery, overlay
from bgbias.attribution.records import EXPLAIN_AGAIN, MASK_SOURCES, ImageScore
from bgbias.attribution.scoring import ImageScorer
from bgbias.data.images import load_mask
from bgbias.data.items import Item, mask_path
from bgbias.fileio import atomic_file
from bgbias.installation import InstallationRecord, installation
from bgbias.saliency.records import masks_record
from bgbias.schema import Record, format_header, read_record

EXPLAIN_FOLDER = "explain"
SCORES_CSV = "scores.csv"
SUMMARY_JSON = "summary.json"
SUMMARY_FORMAT = "bgbias-explain-summary"
GALLERY_PNG = "gallery.png"
MAPS_DIR = "maps"
REFERENCE_MAPS_DIR = "reference-maps"
CSV_COLUMNS = ("id", "label", "mask_source", "foreground_fraction", "attribution_on_foreground", "score")
REFERENCE_COLUMNS = ("reference", "reference_label")
"""The columns ``scores.csv`` adds for an attribution with reference images."""


class ExplainSummary(Record):
    """``summary.json`` as tables and galleries read it back (:mod:`bgbias.schema`); the rest of what
    :func:`run_summary` wrote rides along (``model_extra``)."""

    dataset: str
    dataset_root: str | None = None
    attribution: str
    geometry: dict[str, int | str]  # resize and crop, and the interpolation where not bilinear
    images: int
    scored: int
    mean: float | None
    std: float | None
    installation: InstallationRecord


def run_summary(settings: dict[str, Any], scores: Sequence[ImageScore],
                compute: dict[str, Any]) -> dict[str, Any]:
    """``summary.json``: what was run (the settings a reader needs, the saliency masks folder and what made
    its masks), how it used the machine (``compute``: device, precision, memory format), image and
    mask-source counts, and the statistics of the scores."""
    sources = Counter(score.mask_source for score in scores)
    summary = {
        **format_header(SUMMARY_FORMAT),
        **{key: settings[key] for key in ("dataset", "attribution", "options", "seed", "geometry")},
        "model_sha256": settings["model_sha256"],
        **masks_record(settings["masks_dir"]),
        "compute": compute,
        "installation": installation(),
        "images": len(scores),
        "mask_sources": {source: sources[source] for source in MASK_SOURCES},
        **score_statistics([score.score for score in scores]),
    }
    if "references" in settings:
        same = sum(score.reference_label == score.label for score in scores)
        summary["references"] = {"rule": settings["references"], "same_class": same,
                                 "other_class": len(scores) - same}
    return summary


def score_statistics(values: Sequence[float]) -> dict[str, Any]:
    """Counts and mean / sample std (ddof = 1) / median of the defined (non-NaN) scores; ``None`` where a
    statistic needs more scores than there are."""
    defined = np.array([value for value in values if not np.isnan(value)], dtype=np.float64)
    count = len(defined)
    return {
        "scored": count,
        "undefined": len(values) - count,
        "mean": float(defined.mean()) if count else None,
        "std": float(defined.std(ddof=1)) if count > 1 else None,
        "median": float(np.median(defined)) if count else None,
    }


def scores_csv_text(scores: Sequence[ImageScore]) -> str:
    """``scores.csv``: one row per image; numbers with 6 decimals, an empty cell where undefined. Where the
    maps were made against reference images, each row ends with its reference's id and label."""
    referenced = any(score.reference is not None for score in scores)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS + REFERENCE_COLUMNS if referenced else CSV_COLUMNS)
    for score in scores:
        numbers = (score.foreground_fraction, score.attribution_on_foreground, score.score)
        row = [score.id, score.label, score.mask_source,
               *("" if np.isnan(value) else f"{value:.6f}" for value in numbers)]
        writer.writerow([*row, score.reference, score.reference_label] if referenced else row)
    return buffer.getvalue()


def map_path(item: Item, out_dir: Path, folder: str = MAPS_DIR) -> Path:
    """Where a gallery image's map is kept: its path mirrored under ``out_dir/maps`` as a PNG; with
    :data:`REFERENCE_MAPS_DIR`, where the map of its reference (made with that image) is kept."""
    return mask_path(item, Path(out_dir) / folder)


def save_map(path: Path, attribution_map: np.ndarray) -> None:
    """A map in [0, 1] as an 8-bit greyscale PNG, atomically."""
    pixels = np.rint(np.clip(attribution_map, 0.0, 1.0) * 255).astype(np.uint8)
    with atomic_file(path) as handle:
        Image.fromarray(pixels).save(handle, format="PNG")


def load_map(path: Path) -> np.ndarray:
    """A map saved by :func:`save_map`, back in [0, 1] (8-bit precision)."""
    return np.asarray(load_mask(path), dtype=np.float64) / 255.0


def score_text(score: float) -> str:
    """A foreground score as galleries caption it: two decimals, ``n/a`` where undefined."""
    return "n/a" if np.isnan(score) else f"{score:.2f}"


def write_gallery(
    step: ImageScorer, out_dir: Path, picks: Sequence[int], scores: Sequence[ImageScore], model: str
) -> Path:
    """The gallery of ``picks`` from their saved maps; a map that is missing (deleted by hand) is computed
    again, which gives the same map since its noise depends only on the seed and the image. Where the maps
    were made against reference images, each row goes on with the reference and the overlay of its map."""
    images, masks, maps, captions = [], [], [], []
    referenced: list[np.ndarray] = []
    reference_overlays: list[np.ndarray] = []
    for index in picks:
        path = map_path(step.items[index], out_dir)
        if not path.is_file():
            save_map(path, step([index])[0][2])
        image, mask = step.load(index)
        images.append(image)
        masks.append(mask)
        maps.append(load_map(path))
        caption = f"{step.items[index].id}  score {score_text(scores[index].score)}"
        reference = step.reference(index)
        if reference is not None:
            reference_path = map_path(step.items[index], out_dir, REFERENCE_MAPS_DIR)
            if not reference_path.is_file():
                save_map(reference_path, step.reference_map(index))
            picture = step.load_reference(index)
            referenced.append(picture)
            reference_overlays.append(overlay(picture, load_map(reference_path)))
            caption += f"  reference {reference.id}"
        captions.append(caption)
    extra = {"reference": referenced, "its map": reference_overlays} if referenced else None
    return attribution_gallery(out_dir / GALLERY_PNG, images, masks, {model: maps}, captions,
                               extra_columns=extra)


def explain_dir(home: str | os.PathLike[str], dataset_key: str, split: str, label: str) -> Path:
    """Where a model's foreground scores of one dataset (its key), split and attribution with its options
    (:func:`~bgbias.methods.attribution.attribution_label`) go: ``<home>/explain/<key>-<split>-<label>``."""
    return Path(home) / EXPLAIN_FOLDER / f"{dataset_key}-{split}-{label}"


@dataclass(frozen=True)
class ExplainedSet:
    """One ``<run>/explain/<dataset key>-<split>-<label>/`` folder with its summary."""

    dataset_key: str
    label: str
    folder: Path
    summary: ExplainSummary


def read_summary(out_dir: str | os.PathLike[str]) -> ExplainSummary:
    """The ``summary.json`` of the explanation in ``out_dir``; a missing or damaged one is a
    ``RecordError``."""
    return read_record(Path(out_dir) / SUMMARY_JSON, ExplainSummary, what="the explanation's summary",
                       fix=EXPLAIN_AGAIN, file_format=SUMMARY_FORMAT)


def explained_sets(run_root: str | os.PathLike[str], split: str) -> list[ExplainedSet]:
    """The finished explanations (those with a ``summary.json``) of ``split`` in a run folder, sorted by
    folder name. A folder's name is cut where its summary's attribution name follows ``-<split>-``, so
    reading it needs no registered attribution; other folders are ignored, a damaged summary is a
    ``RecordError`` naming it."""
    found = []
    for summary_path in sorted(Path(run_root).glob(f"{EXPLAIN_FOLDER}/*/{SUMMARY_JSON}")):
        summary = read_summary(summary_path.parent)
        name = summary.attribution
        key, found_at, options = summary_path.parent.name.rpartition(f"-{split}-{name}")
        if found_at and key and (not options or options.startswith("-")):
            found.append(ExplainedSet(key, name + options, summary_path.parent, summary))
    return found
