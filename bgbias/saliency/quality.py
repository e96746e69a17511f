"""How well the saliency masks match ground-truth object masks, measured as the paper did (the paper's code,
``notebooks/rembg_check.ipynb``): both masks binarised with ``value >= 128`` as foreground, then IoU and
"overlap", the share of the ground-truth foreground that the predicted mask covers.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from bgbias.data.images import load_mask, read_image_bytes
from bgbias.errors import ImageError
from bgbias.fileio import write_json_atomic

FOREGROUND_FROM = 128
"""A pixel is foreground when its 8-bit value is at least this (the paper's threshold)."""

QUALITY_NAME = "quality.json"


@dataclass(frozen=True)
class Agreement:
    """IoU and overlap of one predicted mask with its ground truth (``None`` where undefined); ``error``
    says why the ground truth could not be compared."""

    iou: float | None = None
    overlap: float | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        if self.error is not None:
            return {"error": self.error}
        return {"iou": self.iou, "overlap": self.overlap}


def foreground(mask: np.ndarray) -> np.ndarray:
    """Boolean foreground of an 8-bit mask."""
    return np.asarray(mask) >= FOREGROUND_FROM


def agreement(predicted: np.ndarray, truth: np.ndarray) -> Agreement:
    """IoU and overlap of two 8-bit masks of the same shape."""
    if predicted.shape != truth.shape:
        raise ValueError(f"mask shapes differ: {predicted.shape} vs {truth.shape}")
    pred, true = foreground(predicted), foreground(truth)
    intersection = int(np.count_nonzero(pred & true))
    union = int(np.count_nonzero(pred | true))
    true_area = int(np.count_nonzero(true))
    return Agreement(
        iou=intersection / union if union else None, overlap=intersection / true_area if true_area else None
    )


def compare_with_truth(mask: Image.Image, truth_path: str | os.PathLike[str]) -> tuple[Agreement, str | None]:
    """Agreement of ``mask`` with the ground-truth file (resized by nearest neighbour where its size
    differs) and the file's sha256 as read; an unreadable file becomes ``Agreement.error``."""
    try:
        data = read_image_bytes(truth_path)
    except ImageError as err:
        return Agreement(error=err.problem), None
    digest = hashlib.sha256(data).hexdigest()
    try:
        truth = load_mask(truth_path, data)
    except ImageError as err:
        return Agreement(error=err.problem), digest
    if truth.size != mask.size:
        truth = truth.resize(mask.size, Image.Resampling.NEAREST)
    return agreement(np.asarray(mask), np.asarray(truth)), digest


def truth_digest(truth_path: str | os.PathLike[str]) -> str | None:
    """The sha256 ``compare_with_truth`` records for ``truth_path`` as it is now (``None``: unreadable)."""
    try:
        return hashlib.sha256(read_image_bytes(truth_path)).hexdigest()
    except ImageError:
        return None


def summarise(values: Sequence[float]) -> dict[str, float | int]:
    """Count, mean, population std, min, quartiles (linear interpolation, as ``np.percentile``) and max."""
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        return {"n": 0}
    q25, median, q75 = np.percentile(array, [25, 50, 75])
    return {"n": int(array.size), "mean": float(array.mean()), "std": float(array.std()),
            "min": float(array.min()), "q25": float(q25), "median": float(median), "q75": float(q75),
            "max": float(array.max())}


@dataclass(frozen=True)
class QualityReport:
    """Mask quality over every image of a mask folder that has a ground truth."""

    images: int
    iou: dict[str, float | int]
    overlap: dict[str, float | int]
    errors: dict[str, str] = field(default_factory=dict)
    """Image id → why its ground truth could not be compared."""

    def to_json(self) -> dict[str, Any]:
        return {"threshold": FOREGROUND_FROM, "images": self.images, "iou": self.iou, "overlap": self.overlap,
                "errors": dict(sorted(self.errors.items()))}

    def describe(self) -> str:
        """Two short lines for the terminal."""
        lines = [f"mask quality vs ground truth ({self.images} images, foreground = value >= "
                 f"{FOREGROUND_FROM}):"]
        for name, stats in (("IoU", self.iou), ("overlap", self.overlap)):
            if stats.get("n"):
                lines.append(f"  {name:8s} mean {stats['mean']:.3f}  median {stats['median']:.3f}  "
                             f"quartiles {stats['q25']:.3f}–{stats['q75']:.3f}  (n={stats['n']})")
        if self.errors:
            lines.append(f"  {len(self.errors)} ground-truth masks could not be read")
        return "\n".join(lines)


def quality_report(agreements: Iterable[tuple[str, Agreement]]) -> QualityReport | None:
    """Summarise ``(image id, agreement)`` pairs; ``None`` when there are none."""
    pairs = list(agreements)
    if not pairs:
        return None
    ious = [a.iou for _, a in pairs if a.iou is not None]
    overlaps = [a.overlap for _, a in pairs if a.overlap is not None]
    errors = {image_id: a.error for image_id, a in pairs if a.error is not None}
    return QualityReport(images=len(pairs), iou=summarise(ious), overlap=summarise(overlaps), errors=errors)


def write_quality(out_dir: Path, report: QualityReport) -> Path:
    path = Path(out_dir) / QUALITY_NAME
    write_json_atomic(path, report.to_json())
    return path
