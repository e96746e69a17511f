"""A dataset's shipped masks (the bench's exact alpha) laid out as ``bgbias masks`` lays out U²-Net's, so
every command takes them with ``--masks DIR`` (``bgbias masks --dataset bench --model ground-truth``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bgbias.data.items import Dataset, Item, default_masks_dir, mask_path
from bgbias.data.layout import describe_paths
from bgbias.errors import DatasetError
from bgbias.fileio import write_bytes_atomic

GROUND_TRUTH = "ground-truth"
"""The ``--model`` name of the shipped masks, and the suffix of their default folder."""


def default_ground_truth_dir(dataset: Dataset) -> Path:
    """Where ``bgbias masks --model ground-truth`` puts the shipped masks: beside the U²-Net ones."""
    return default_masks_dir(dataset, GROUND_TRUTH)


@dataclass(frozen=True)
class GroundTruthCopy:
    """Where the masks went, how many were written and how many were there already, byte for byte."""

    out_dir: Path
    written: int
    kept: int

    def describe(self) -> str:
        return (f"ground-truth masks in {self.out_dir}: {self.written} written, {self.kept} already there "
                "and unchanged")


def copy_ground_truth_masks(items: Sequence[Item], out_dir: str | os.PathLike[str]) -> GroundTruthCopy:
    """Copy each item's shipped mask to where ``bgbias masks`` would write its saliency mask (atomically;
    one already there with the same bytes is kept); a ``DatasetError`` naming the items without one."""
    missing = [item.image for item in items if item.ground_truth_mask is None]
    if missing:
        raise DatasetError(
            f"{len(missing)} of {len(items)} images have no ground-truth mask: {describe_paths(missing)}",
            fix="make U²-Net masks instead (bgbias masks --model u2net); only datasets that ship masks, such "
                "as the bench, have ground truth",
        )
    written = kept = 0
    for item in items:
        assert item.ground_truth_mask is not None
        target = mask_path(item, Path(out_dir))
        data = Path(item.ground_truth_mask).read_bytes()
        if target.is_file() and target.read_bytes() == data:
            kept += 1
            continue
        write_bytes_atomic(target, data)
        written += 1
    return GroundTruthCopy(Path(out_dir), written, kept)
