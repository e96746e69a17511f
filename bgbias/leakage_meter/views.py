"""What the leakage meter embeds: a split's images with the object removed (background-only, the mask dilated
by 2 % of the crop's side so the soft edge's halo leaves with it) or alone on black (foreground-only), at
the evaluation geometry; the profile's ``only-bg-*`` and ``only-fg`` variants.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bgbias.corrupted.render import load_pair
from bgbias.data.geometry import EvalGeometry
from bgbias.data.items import Item
from bgbias.data.tensors import chw_tensor
from bgbias.data.transforms import eval_transform_pair
from bgbias.errors import OptionError
from bgbias.variants.variants import FILLS, background_only, render_variant

VIEWS = ("background", "foreground")
"""The two views of an image the meter compares: the background alone and the object alone."""


class ViewImages:
    """The ``view`` (:data:`VIEWS`) of each of ``items``, their masks from ``masks_dir`` (or their own), at
    ``geometry``; the background's hole filled with ``fill``."""

    def __init__(
        self, items: Sequence[Item], view: str, *, masks_dir: Path, dataset_name: str, geometry: EvalGeometry,
        fill: str = "inpainted",
    ) -> None:
        if view not in VIEWS:
            raise OptionError(f"unknown view {view!r}", fix=f"use one of {', '.join(VIEWS)}")
        if fill not in FILLS:
            raise OptionError(f"unknown fill {fill!r}", fix=f"use one of {', '.join(FILLS)}")
        self.items = list(items)
        self.view = view
        self.masks_dir = Path(masks_dir)
        self.dataset_name = dataset_name
        self.geometry = geometry
        self.fill = fill

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"image": chw_tensor(self.pixels(i)), "label": int(self.items[i].label), "index": i}

    def pixels(self, i: int) -> np.ndarray:
        """Image ``i`` of the view, ``uint8`` (crop, crop, 3)."""
        image, mask = eval_transform_pair(*load_pair(self.items[i], self.masks_dir, self.dataset_name),
                                          self.geometry)
        if self.view == "foreground":
            return render_variant("only-fg", image, mask)
        return background_only(image, mask, self.fill)
