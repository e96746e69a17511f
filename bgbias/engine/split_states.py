"""The per-image states of one split's image sets (clean, corrupted repeats) for one model, each embedded once
and kept in the model's evaluation cache, so evaluating, re-scoring and picking attribution references share
one forward pass per set. A cached state is used only when its arrays fit the model and the set.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from bgbias.corrupted.manifests import ids_sha256
from bgbias.data.eval_images import EvalImages
from bgbias.engine.device import precision_name
from bgbias.engine.embedding import embed_images
from bgbias.engine.embedding_cache import EmbeddingCache, files_fingerprint
from bgbias.methods.embedding_model import claim_home
from bgbias.models.precision import network_precision
from bgbias.retrieval.state import named_arrays

if TYPE_CHECKING:
    from bgbias.data.items import Item
    from bgbias.data.transforms import EvalGeometry
    from bgbias.methods.embedding_model import EmbeddingModel

EVAL_FOLDER = "eval"
"""Under a model's home: ``cache/`` (states of evaluated sets, keyed by what made them) and one report
folder per measured set and split."""

EVAL_BATCH_SIZE = 64


@dataclass
class SplitStates:
    """Embeds sets of ``items`` (in that order) with ``model`` through its evaluation cache."""

    model: EmbeddingModel
    dataset_name: str
    items: Sequence[Item]
    geometry: EvalGeometry
    batch_size: int | None = None
    workers: int | None = None
    progress: bool = False
    log: Callable[[str], None] = print
    on_disk: bool = True
    """Keep the states in the model's cache folder (False: nothing is read from or written to disk; a set
    of a dataset's samples in memory is never cached there, having no file to tell its versions by)."""
    embedded: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.labels = np.array([item.label for item in self.items], dtype=np.int64)
        self.base_key = {
            "model": self.model.fingerprint(),
            "dataset": self.dataset_name,
            "ids": ids_sha256(self.items),
            "images": files_fingerprint(item.image for item in self.items),
            "geometry": self.geometry.as_dict(),
            "precision": precision_name(self.model.amp),
        }
        self._shapes: dict[str, tuple[int, ...]] | None = None
        cached = self.on_disk and self.base_key["images"] is not None
        self.cache = EmbeddingCache(Path(self.model.home) / EVAL_FOLDER / "cache") if cached else None

    def clean(self) -> dict[str, np.ndarray]:
        return self.state(EvalImages(self.items, self.geometry), {"set": "clean"}, "clean")

    def state(self, images: Any, key: dict[str, Any], desc: str) -> dict[str, np.ndarray]:
        """The state of ``images``: from the cache where it fits this model and images, else embedded."""
        key = {**self.base_key, **key}
        stored = None if self.cache is None else self.cache.load(key)
        if stored is not None:
            if self._shapes is None:  # one image through the model: what a cached file must match
                self._shapes = probe_shapes(self.model, images)
            problem = cache_mismatch(stored, len(self.items), self._shapes)
            if problem is None:
                self.log(f"{desc}: cached embeddings")
                return stored
            self.log(f"{desc}: cached embeddings ignored ({problem}); embedding again")
        made, made_labels = embed_images(self.model, images, self.model.device,
                                         batch_size=self.batch_size or EVAL_BATCH_SIZE, workers=self.workers,
                                         amp=self.model.amp, progress=self.progress, desc=desc)
        if not np.array_equal(made_labels, self.labels):
            raise AssertionError("the embedded images came back out of their dataset's order")
        if self.cache is not None:
            claim_home(self.model)  # the first result goes into the home: an external model's model.json too
            self.cache.save(key, made)
        self.embedded += 1
        self.log(f"{desc}: embedded {len(self.labels)} images")
        return made


def probe_shapes(model: EmbeddingModel, images: Any) -> dict[str, tuple[int, ...]]:
    """Each of the model's per-image arrays' shape (no image axis), from the first of ``images``."""
    pixels = images[0]["image"][None].to(model.device).float().div_(255)
    with torch.inference_mode(), network_precision(model.amp):
        return {name: tuple(array.shape[1:]) for name, array in named_arrays(model.embed(pixels)).items()}


def cache_mismatch(
    state: dict[str, np.ndarray], count: int, shapes: dict[str, tuple[int, ...]]
) -> str | None:
    """Why a cached state cannot stand for ``count`` images of arrays ``shapes`` (None: it can)."""
    if set(state) != set(shapes):
        return f"arrays {sorted(state)}, expected {sorted(shapes)}"
    for name, array in state.items():
        expected = (count, *shapes[name])
        if array.shape != expected:
            return f"shape {array.shape} of {name}, expected {expected}"
        if array.dtype != np.float32:
            return f"dtype {array.dtype} of {name}, expected float32"
        if not np.isfinite(array).all():
            return f"not every value of {name} is finite"
    return None
