"""The picture of the classes whose background gives them away most: for each, a few of its background-only
images with their nearest background-only neighbours, framed green where they share its class
(:mod:`bgbias.retrieval.gallery`, one block per class).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bgbias.leakage_meter.result import ClassLeakage
from bgbias.leakage_meter.views import ViewImages
from bgbias.retrieval.gallery import GalleryQuery, GalleryRow, write_retrieval_gallery

CLASS_GALLERY = "leakage-classes.png"
"""The picture's file name in the meter's ``out`` folder, linked from ``leakage.md``."""
GALLERY_CLASSES = 4
"""Classes the picture shows: the first of the per-class table."""
IMAGES_PER_CLASS = 3
"""Rows per class: the class's first images in the split's order (not chosen by their score)."""
GALLERY_NEIGHBOURS = 5
"""Neighbours per row, nearest first."""


def write_class_gallery(
    path: Path, background: ViewImages, labels: np.ndarray, per_query_map_at_r: np.ndarray,
    neighbours: np.ndarray, per_class: tuple[ClassLeakage, ...],
) -> Path:
    """The picture of the first :data:`GALLERY_CLASSES` of ``per_class`` (ordered as the meter orders them),
    from the ``background`` view's images, their own AP@R and ``neighbours`` (N, k) nearest first."""
    queries = []
    for row in per_class[:GALLERY_CLASSES]:
        members = np.flatnonzero(labels == row.label)[:IMAGES_PER_CLASS]
        queries.append(GalleryQuery(
            caption=f"class {row.name} ({row.images} images): background MAP@R {row.background_map_at_r:.2f}"
                    f" (chance {row.chance_map_at_r:.2f}), object {row.foreground_map_at_r:.2f}",
            # A row per background-only image (named by its AP@R) and its nearest background-only neighbours.
            rows=tuple(GalleryRow.ranked(f"AP@R {per_query_map_at_r[q]:.2f}", background.pixels, labels,
                                         int(q), neighbours[q, :GALLERY_NEIGHBOURS]) for q in members),
        ))
    return write_retrieval_gallery(path, queries)

