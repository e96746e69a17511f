"""What the profile embeds of a variant set: a split's images as a variant manifest fixes them.

A map-style dataset like :class:`~bgbias.corrupted.corrupted_images.CorruptedImages` (decoding in CPU workers,
``uint8`` tensors out), rendering each image on the fly: pixel for pixel what ``bgbias corrupt --variant
--render`` writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bgbias.corrupted.manifests import manifest_entries
from bgbias.corrupted.render import load_pair
from bgbias.data.items import Item, mask_source
from bgbias.data.tensors import chw_tensor
from bgbias.data.transforms import eval_transform_pair
from bgbias.errors import DatasetError
from bgbias.variants.variant_manifests import VariantManifest
from bgbias.variants.variants import render_variant


class VariantImages:
    """The images of ``items`` in ``manifest``'s variant, masks from ``masks_dir``; ``items`` (matched by id)
    may be any part of the manifest's split that holds every donor its images name."""

    def __init__(
        self, items: Sequence[Item], manifest: VariantManifest, masks_dir: Path, dataset_name: str
    ) -> None:
        self.items = list(items)
        self.entries = manifest_entries(manifest, self.items, dataset_name, "variant",
                                        "make the variant sets of this split again")
        self.by_id = {item.id: item for item in items}
        outside = sorted({entry.donor for entry in self.entries} - {None} - set(self.by_id))
        if outside:
            raise DatasetError(
                f"{len(outside)} donor images of the variant are not among the images to evaluate (first: "
                f"{', '.join(str(d) for d in outside[:3])})",
                path=manifest.path, fix="evaluate the whole split: mixed variants take backgrounds from it",
            )
        self.manifest = manifest
        self.masks_dir = Path(masks_dir)
        self.dataset_name = dataset_name

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"image": chw_tensor(self.pixels(i)), "label": int(self.items[i].label), "index": i}

    def pixels(self, i: int) -> np.ndarray:
        """Image ``i`` of the set, ``uint8`` (crop, crop, 3)."""
        item, entry = self.items[i], self.entries[i]
        image, mask = self._cropped(item)
        donor = None if entry.donor is None else self._cropped(self.by_id[entry.donor])
        return render_variant(self.manifest.variant.name, image, mask, *(donor or (None, None)))

    def sources(self, i: int) -> tuple[list[Path], list[Path]]:
        """The image files and mask files image ``i`` is made from (its own, then its donor's)."""
        entry = self.entries[i]
        used = [self.items[i]] + ([] if entry.donor is None else [self.by_id[entry.donor]])
        return [item.image for item in used], [mask_source(item, self.masks_dir) for item in used]

    def _cropped(self, item: Item) -> tuple[np.ndarray, np.ndarray]:
        image, mask = load_pair(item, self.masks_dir, self.dataset_name)
        return eval_transform_pair(image, mask, self.manifest.geometry)
