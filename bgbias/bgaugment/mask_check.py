"""Preflight for everything that composites: each image needs its saliency mask before the first one is used,
so a missing mask is one error naming all of them before any work starts. Masks that show no object are found
here too (:func:`empty_masks`): an image composited with one is background alone, so reports flag it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from bgbias.data.images import load_mask
from bgbias.data.items import Item, mask_source
from bgbias.data.layout import describe_paths, missing_files
from bgbias.errors import ImageError, given
from bgbias.saliency.records import read_all_records, stale_masks

HALF_STRENGTH = 128
"""A mask without an empty flag shows no object when no pixel reaches this (of 255): no pixel is more object
than background, the rule ``bgbias masks`` applies to the network's raw output (``--empty-below 0.5``)."""

if TYPE_CHECKING:
    from bgbias.data.memory import InMemoryImage


def saliency_masks(
    items: Sequence[Item], masks_dir: Path, dataset_name: str, parameter: str = "masks"
) -> list[Path | InMemoryImage]:
    """The mask of every item, in order (:func:`~bgbias.data.items.mask_source`); an ``ImageError`` naming
    the missing ones, and the stale ones (made from another version of their image), with the fix for the
    argument ``parameter`` that named the folder."""
    masks_dir = Path(masks_dir)
    paths = [mask_source(item, masks_dir) for item in items]
    missing = missing_files([path for path in paths if isinstance(path, Path)])
    if missing:
        raise ImageError(
            f"{len(missing)} of {len(paths)} saliency masks are missing in {masks_dir}: "
            f"{describe_paths(missing)}",
            path=masks_dir,
            fix=f"make them with `bgbias masks --dataset {dataset_name}`, or name the folder that holds them "
            f"({given('DIR')})",
            parameter=parameter,
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


def empty_masks(items: Sequence[Item], masks_dir: Path) -> list[str]:
    """The ids of ``items`` whose saliency mask shows no object: those ``bgbias masks`` flagged empty (the
    stretched mask cannot tell), and among the others those with no pixel at :data:`HALF_STRENGTH`."""
    records = read_all_records(Path(masks_dir))
    flags: dict[str, bool] = {}
    unflagged = []
    for item in items:
        record = records.get(item.id) if item.saliency_mask is None else None
        if record is not None and record.ok and record.empty is not None:
            flags[item.id] = record.empty
        else:
            unflagged.append(item)

    def shows_nothing(item: Item) -> bool:
        return load_mask(mask_source(item, Path(masks_dir))).getextrema()[1] < HALF_STRENGTH

    with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:  # decoding PNGs releases the GIL
        flags.update(zip((item.id for item in unflagged), pool.map(shows_nothing, unflagged), strict=True))
    return [item.id for item in items if flags[item.id]]
