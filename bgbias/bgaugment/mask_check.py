"""Preflight for everything that composites: each image needs its saliency mask before the first one is used.

BGAugment training, corrupted validation and rendering corrupted sets all check here, so a missing mask is
one error naming all of them, before any work starts, rather than a failure half-way through.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from bgbias.data.items import Item, mask_source
from bgbias.data.layout import describe_paths, missing_files
from bgbias.errors import ImageError
from bgbias.saliency.records import stale_masks

if TYPE_CHECKING:
    from bgbias.data.memory import InMemoryImage


def saliency_masks(
    items: Sequence[Item], masks_dir: Path, dataset_name: str
) -> list[Path | InMemoryImage]:
    """The mask of every item, in order (:func:`~bgbias.data.items.mask_source`: its own, else its file in
    ``masks_dir``); ``ImageError`` naming the missing files when any is absent, and the stale ones when
    ``bgbias masks`` recorded that a mask was made from another version of its image."""
    masks_dir = Path(masks_dir)
    paths = [mask_source(item, masks_dir) for item in items]
    missing = missing_files([path for path in paths if isinstance(path, Path)])
    if missing:
        raise ImageError(
            f"{len(missing)} of {len(paths)} saliency masks are missing in {masks_dir}: "
            f"{describe_paths(missing)}",
            path=masks_dir,
            fix=f"make them with `bgbias masks --dataset {dataset_name}`, or name the folder that holds them "
            "(--masks DIR)",
        )
    files = [item for item in items if item.saliency_mask is None and isinstance(item.image, Path)]
    stale = stale_masks(files, masks_dir)
    if stale:
        raise ImageError(
            f"{len(stale)} saliency masks in {masks_dir} were made from other versions of their images: "
            f"{describe_paths([item.image for item in stale])}",
            path=masks_dir,
            fix=f"run `bgbias masks --dataset {dataset_name}` again: it re-makes exactly these masks",
        )
    return paths
