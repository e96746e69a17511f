"""What the evaluation embeds of a clean split: its images at the evaluation geometry, decoded in loader
workers as ``uint8`` tensors (the model's input convention is applied on the device). The corrupted
counterpart is :class:`bgbias.corrupted.corrupted_images.CorruptedImages`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bgbias.data.images import load_image
from bgbias.data.items import Item
from bgbias.data.tensors import chw_tensor
from bgbias.data.transforms import EvalGeometry, eval_transform


class EvalImages:
    """The clean images of ``items``: shorter side resized, centre crop (:func:`eval_transform`)."""

    def __init__(self, items: Sequence[Item], geometry: EvalGeometry) -> None:
        self.items = list(items)
        self.geometry = geometry

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        item = self.items[i]
        pixels = eval_transform(load_image(item.image), self.geometry)
        return {"image": chw_tensor(pixels), "label": int(item.label), "index": i}
