"""How much the mask model decides the corrupted score (issue 50): the paper's corrupted repeats cut out a
second time with another source's masks, from the same manifests (backgrounds, crops, flips), so that only the
masks differ; scored as the first, and compared with them query by query and draw by draw. Beside it, how far
the two sources' masks agree: the IoU of their foregrounds per image at the evaluation crop.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bgbias.bgaugment.mask_check import saliency_masks
from bgbias.corrupted.corrupted_images import CorruptedImages
from bgbias.corrupted.render import load_pair
from bgbias.data.images import load_matching_mask
from bgbias.data.items import mask_source
from bgbias.data.transforms import eval_transform_mask
from bgbias.engine.embedding_cache import files_fingerprint
from bgbias.errors import PARAMETER, OptionError
from bgbias.measurement.confidence import dumped
from bgbias.measurement.intervals import paired_difference, per_query
from bgbias.retrieval.metrics import METRICS
from bgbias.saliency.quality import agreement
from bgbias.saliency.records import masks_record

if TYPE_CHECKING:
    from bgbias.corrupted.manifests import CorruptedManifest
    from bgbias.data.geometry import EvalGeometry
    from bgbias.data.items import Item
    from bgbias.retrieval.metrics import RetrievalScores

WORST_LISTED = 5
"""How many images the record names among those whose two masks agree least."""


@dataclass(frozen=True)
class ComparedSets:
    """The paper's corrupted repeats cut out with the second masks (``masks_dir``), their files' fingerprint
    (a set's cached embeddings are keyed by it, so the two sources' never meet), and per image, in query
    order, the IoU of the two sources' masks."""

    masks_dir: Path
    corrupted: list[tuple[CorruptedManifest, CorruptedImages]]
    masks_print: str | None
    ious: np.ndarray


def compared_sets(
    items: Sequence[Item],
    manifests: Sequence[CorruptedManifest],
    first_dir: Path,
    second_dir: Path,
    dataset_name: str,
    geometry: EvalGeometry,
) -> ComparedSets:
    """The sets of ``manifests`` with the masks of ``second_dir``, checked before anything is embedded: the
    folder must exist and hold a current mask of every image, and the images may not bring their own masks
    (the folder would not be read)."""
    second_dir = Path(second_dir)
    if any(item.saliency_mask is not None for item in items):
        raise OptionError("these images come with their own saliency masks, so a second masks folder would "
                          "not be read", fix=f"score them without {PARAMETER}", parameter="compare_masks")
    if not second_dir.is_dir():
        raise OptionError("the second masks folder does not exist", path=second_dir,
                          parameter="compare_masks",
                          fix=f"make them with `bgbias masks --dataset {dataset_name} --model MODEL --out "
                              f"{second_dir}`, or pass {PARAMETER} the folder that holds them")
    masks = saliency_masks(items, second_dir, dataset_name, parameter="compare_masks")
    corrupted = [(manifest, CorruptedImages(items, manifest, second_dir, dataset_name))
                 for manifest in manifests]
    return ComparedSets(second_dir, corrupted, files_fingerprint(masks),
                        mask_ious(items, first_dir, second_dir, dataset_name, geometry))


def mask_ious(
    items: Sequence[Item], first_dir: Path, second_dir: Path, dataset_name: str, geometry: EvalGeometry
) -> np.ndarray:
    """Per item, the IoU of its two masks' foregrounds (:func:`~bgbias.saliency.quality.agreement`'s
    threshold) at the evaluation crop, where the corrupted images cut them out; 1 where both are empty."""

    def iou(item: Item) -> float:
        image, first = load_pair(item, first_dir, dataset_name)
        second = load_matching_mask(mask_source(item, second_dir), image.size, item, dataset_name)
        value = agreement(eval_transform_mask(first, geometry), eval_transform_mask(second, geometry)).iou
        return 1.0 if value is None else value

    with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:  # decoding PNGs releases the GIL
        return np.fromiter(pool.map(iou, items), dtype=np.float64, count=len(items))


def mask_sensitivity(
    first: Sequence[RetrievalScores],
    second: Sequence[RetrievalScores],
    first_dir: Path,
    compared: ComparedSets,
    second_scores: dict[str, Any],
    ids: Sequence[str],
) -> dict[str, Any]:
    """The report's ``mask_sensitivity``: the two mask sources, the corrupted scores with the second
    (``second_scores``, as the report keeps the first's), per metric the paired difference second − first
    (the same queries, and draw r of each on the same backgrounds), and the masks' agreement."""
    ious = compared.ious
    worst = np.argsort(ious, kind="stable")[:WORST_LISTED]
    return {
        "first": masks_record(first_dir),
        "second": masks_record(compared.masks_dir),
        "corrupted": second_scores,
        "difference": {name: dumped(paired_difference(per_query(first, name), per_query(second, name)))
                       for name in METRICS},
        "agreement": {"images": len(ious), "mean": float(ious.mean()), "median": float(np.median(ious)),
                      "worst": float(ious.min()),
                      "worst_images": [{"id": str(ids[i]), "iou": float(ious[i])} for i in worst]},
    }
