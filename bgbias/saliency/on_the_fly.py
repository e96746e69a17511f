"""Saliency masks made when first needed, for a table of one's own images without masks
(``masks=bgbias.U2NetMasks()``): made once per process and image, kept in memory, never written. ``bgbias
masks`` is the way for a whole dataset; this one is for a notebook.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any

from PIL import Image

from bgbias.data.images import load_image
from bgbias.data.memory import InMemoryImage
from bgbias.data.table import ImageTable
from bgbias.options import DEFAULT_MASK_MODEL
from bgbias.saliency.sessions import Inference, MaskSession, check_model, chosen_backend, open_session

_KEPT: dict[tuple[str, Any], Image.Image] = {}
"""Masks made in this process, by model and image (a file's path, size and mtime; a sample's pixels' sha256,
as an object's id is reused once freed)."""


@dataclass(frozen=True)
class U2NetMasks:
    """``masks=`` that makes each image's mask with ``model`` on ``device`` by ``backend`` when its table is
    first audited, and keeps it in memory for this process."""

    model: str = DEFAULT_MASK_MODEL
    device: str = "auto"
    backend: str = "auto"

    def __post_init__(self) -> None:
        """Refused here, where the spec is written, not at the first audit that makes a mask."""
        check_model(self.model)
        chosen_backend(self.model, self.inference())

    def inference(self) -> Inference:
        return Inference(backend=self.backend, device=self.device)


def with_u2net_masks(table: ImageTable, spec: U2NetMasks) -> ImageTable:
    """``table`` with a U²-Net mask for every image without one, made here once per image and model
    (:data:`_KEPT`), so loader workers receive them made."""
    items = table.items()
    session: MaskSession | None = None
    masks: list[Image.Image | None] = []
    for item in items:
        if item.saliency_mask is not None:
            masks.append(None)
            continue
        image = load_image(item.image) if isinstance(item.image, InMemoryImage) else None
        key = (spec.model, spec.backend, _image_key(item.image, image))
        if key not in _KEPT:
            session = session or open_session(spec.model, spec.inference())
            image = image or load_image(item.image)
            _KEPT[key] = session.finish(session.infer([session.prepare(image)])[0], image.size).image
        masks.append(_KEPT[key])
    rows = [(item.image, item.label, item.saliency_mask if item.saliency_mask is not None
             else InMemoryImage(masks, index, None, f"{item.id} ({spec.model} mask)"))
            for index, item in enumerate(items)]
    return ImageTable.from_rows(rows, table.root)


def _image_key(source: Any, image: Image.Image | None) -> Any:
    """A file by path, size and modification time; a sample (``image``, read already) by its pixels."""
    if image is not None:
        return (image.size, hashlib.sha256(image.tobytes()).hexdigest())
    stat = os.stat(source)
    return (os.fspath(source), stat.st_size, stat.st_mtime_ns)
