"""The ledger of a rendered corrupted set (``render.jsonl``): the manifest it renders, then per image the
sha256 of its photo, its mask and the PNG written (for a mixed variant, the sha256 of the digests, one per
line). A rendered image is kept on resume only while all three still hold, so a changed photo, mask or PNG is
rendered again. Reading, appending, rewriting and claiming are :mod:`bgbias.ledger`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bgbias.assets.digest import is_sha256
from bgbias.ledger import Ledger
from bgbias.schema import format_header

LEDGER_NAME = "render.jsonl"
LEDGER_FORMAT = "bgbias-corrupted-render"
_RECORD_KEYS = frozenset({"id", "image_sha256", "mask_sha256", "png_sha256"})


@dataclass(frozen=True)
class RenderRecord:
    """What one rendered image was made from (image and mask file digests) and what was written (PNG)."""

    id: str
    image_sha256: str
    mask_sha256: str
    png_sha256: str

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "image_sha256": self.image_sha256, "mask_sha256": self.mask_sha256,
                "png_sha256": self.png_sha256}

    @classmethod
    def from_json(cls, data: Any) -> RenderRecord | None:
        """The record a ledger line holds, or ``None`` unless it has exactly the fields ``to_json`` writes."""
        if not isinstance(data, dict) or set(data) != _RECORD_KEYS or not isinstance(data["id"], str):
            return None
        if not all(is_sha256(data[key]) for key in ("image_sha256", "mask_sha256", "png_sha256")):
            return None
        return cls(data["id"], data["image_sha256"], data["mask_sha256"], data["png_sha256"])


def ledger_header(manifest_sha256: str) -> dict[str, Any]:
    """The first line: the folder renders the manifest with this digest and no other."""
    return {**format_header(LEDGER_FORMAT), "manifest_sha256": manifest_sha256}


RENDER_LEDGER: Ledger[RenderRecord] = Ledger(RenderRecord.to_json, RenderRecord.from_json,
                                             file_format=LEDGER_FORMAT)
"""``render.jsonl``: the header of :func:`ledger_header`, then :class:`RenderRecord` lines, canonical JSON."""


def claim_out_dir(out_dir: Path, manifest_sha256: str, force: bool) -> dict[str, RenderRecord]:
    """The records already in ``out_dir`` for this manifest (by id), ready to be appended to.

    A ledger of another manifest, or a non-empty folder without a ledger, is an ``OptionError`` unless
    ``force``, which starts a fresh ledger (every image is then rendered again). The ledger is written before
    the first image, so every PNG in the folder belongs to it.
    """
    return RENDER_LEDGER.claim(
        Path(out_dir) / LEDGER_NAME,
        ledger_header(manifest_sha256),
        force=force,
        other=lambda _header: "the output folder holds a render of another corrupted-set manifest",
        foreign="the output folder is not empty and holds no render of a corrupted set",
        fix="pass another output folder, or start this one over (`bgbias corrupt ... --render DIR --force` "
            "renders every image again)",
    )


def write_ledger(path: Path, manifest_sha256: str, records: Iterable[RenderRecord]) -> None:
    """Rewrite a ledger atomically: the header, then ``records`` in the given order (the canonical form)."""
    RENDER_LEDGER.write(path, records, header=ledger_header(manifest_sha256))
