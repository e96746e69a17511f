"""What the evaluation embeds of a corrupted set: a split's images with their backgrounds replaced.

A map-style dataset like :class:`bgbias.data.eval_images.EvalImages` (decoding in CPU workers, ``uint8``
tensors out, no torch import), which replays a manifest made by ``bgbias corrupt``: pixel for pixel what
:func:`render_entry` (and so ``bgbias corrupt --render``) produces.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from bgbias.corrupted.manifests import CorruptedEntry, CorruptedManifest, manifest_entries
from bgbias.corrupted.render import load_pair, render_entry
from bgbias.data.images import load_image
from bgbias.data.items import Item
from bgbias.data.tensors import chw_tensor


class CorruptedImages:
    """The images of ``items`` (any part of the manifest's split, matched by id) with their backgrounds
    replaced as ``manifest`` fixes it, masks from ``masks_dir``. Each worker decodes a pool background the
    first time one of its images needs it and keeps it: a pool is a few hundred photos at most."""

    def __init__(
        self, items: Sequence[Item], manifest: CorruptedManifest, masks_dir: Path, dataset_name: str
    ) -> None:
        self.items = list(items)
        self.entries: list[CorruptedEntry] = manifest_entries(manifest, self.items, dataset_name,
                                                              "corrupted-set", "make the manifests again")
        self.manifest = manifest
        self.masks_dir = Path(masks_dir)
        self.dataset_name = dataset_name
        self._backgrounds: dict[str, Image.Image] = {}

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        item, entry = self.items[i], self.entries[i]
        image, mask = load_pair(item, self.masks_dir, self.dataset_name)
        background = self._background(entry.background)
        corrupted = render_entry(image, mask, background, entry, self.manifest.geometry)[2]
        return {"image": chw_tensor(corrupted), "label": int(item.label), "index": i}

    def _background(self, name: str) -> Image.Image:
        if name not in self._backgrounds:
            self._backgrounds[name] = load_image(self.manifest.pool_dir / name)
        return self._backgrounds[name]
