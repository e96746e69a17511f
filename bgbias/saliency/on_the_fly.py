"""Saliency masks made when they are first needed, for a table of one's own images that came without masks
(``masks=bgbias.U2NetMasks()``): each image goes through U²-Net once per process, and its mask is kept in
memory for the next call (the next epoch's audit), never written to disk. ``bgbias masks`` is the way for a
whole dataset, resumable and checked; this one is for a notebook.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from PIL import Image

from bgbias.data.images import load_image
from bgbias.data.memory import InMemoryImage
from bgbias.data.table import ImageTable
from bgbias.saliency.sessions import DEFAULT_MODEL, MaskSession, check_device, check_model

_KEPT: dict[tuple[str, Any], Image.Image] = {}
"""Masks made in this process, by model and image (a file's path, size and modification time; a sample's
dataset object and index)."""


@dataclass(frozen=True)
class U2NetMasks:
    """``masks=`` that makes each image's saliency mask with ``model`` (``u2net``, ``u2netp``, …) on
    ``device`` when the image is first used, and keeps it in memory for this process."""

    model: str = DEFAULT_MODEL
    device: str = "auto"

    def __post_init__(self) -> None:
        check_model(self.model)
        check_device(self.device)


@dataclass
class _MaskMaker:
    """The masks of ``images`` by position, made on first access (a loader worker opens its own session)."""

    images: list[Any]
    spec: U2NetMasks
    _session: MaskSession | None = field(default=None, repr=False)

    def __getitem__(self, index: int) -> Image.Image:
        image = self.images[index]
        key = (self.spec.model, _image_key(image))
        if key not in _KEPT:
            _KEPT[key] = self._make(load_image(image))
        return _KEPT[key]

    def _make(self, image: Image.Image) -> Image.Image:
        from bgbias.saliency.sessions import open_session

        if self._session is None:
            self._session = open_session(self.spec.model, device=self.spec.device)
        session = self._session
        return session.finish(session.infer(session.prepare(image)), image.size).image

    def __getstate__(self) -> dict[str, Any]:  # a session does not pickle: each worker opens its own
        return {**self.__dict__, "_session": None}


def with_u2net_masks(table: ImageTable, spec: U2NetMasks) -> ImageTable:
    """``table`` with a U²-Net mask for every image that has none of its own (made when first used)."""
    items = table.items()
    maker = _MaskMaker([item.image for item in items], spec)
    rows = [(item.image, item.label, item.saliency_mask if item.saliency_mask is not None
             else InMemoryImage(maker, index, None, f"{item.id} ({spec.model} mask)"))
            for index, item in enumerate(items)]
    return ImageTable.from_rows(rows, table.root)


def _image_key(image: Any) -> Any:
    if isinstance(image, InMemoryImage):
        return (id(image.samples), image.index, image.field)
    stat = os.stat(image)
    return (os.fspath(image), stat.st_size, stat.st_mtime_ns)
