"""Training images for the DataLoader workers: decode, one paired random geometry for image and mask,
``uint8`` tensors out (4× less to copy than float; the device converts). A draw is ``(index, seed)``
(:mod:`bgbias.data.samplers`), so the result depends on the draw alone. ``TrainImages`` is a plain map-style
dataset, which keeps torch out of this module's import.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bgbias.data.images import load_image, load_matching_mask
from bgbias.data.items import Item
from bgbias.data.samplers import Draw
from bgbias.data.tensors import chw_tensor
from bgbias.data.train_geometry import TrainGeometry, apply_train_transform, make_train_transform


class TrainImages:
    """Training view of ``items``: ``dataset[(index, seed)]`` is a dict with ``image`` (uint8, 3×crop×crop),
    ``label``, ``index`` and, with ``masks`` (one path per item), ``mask`` (uint8, 1×crop×crop).
    ``dataset_name`` names the dataset in the command that remakes the masks."""

    def __init__(
        self,
        items: Sequence[Item],
        geometry: TrainGeometry,
        masks: Sequence[Path] | None = None,
        *,
        dataset_name: str | None = None,
    ):
        if masks is not None and len(masks) != len(items):
            raise ValueError(f"{len(masks)} mask paths for {len(items)} items: give one per item")
        self.items = list(items)
        self.geometry = geometry
        self.masks = None if masks is None else list(masks)
        self.dataset_name = dataset_name
        self._transform = make_train_transform(geometry)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, draw: Draw) -> dict[str, Any]:
        index, seed = draw
        item = self.items[index]
        image = load_image(item.image)
        mask = None
        if self.masks is not None:
            name = self.dataset_name or "NAME"
            mask = np.asarray(load_matching_mask(self.masks[index], image.size, item, name))
        image_out, mask_out = apply_train_transform(self._transform, seed, np.asarray(image), mask)
        sample: dict[str, Any] = {"image": chw_tensor(image_out), "label": item.label, "index": index}
        if mask_out is not None:
            sample["mask"] = chw_tensor(mask_out)
        return sample
