"""The ledger of a rendered corrupted set (``render.jsonl``): the manifest it renders, then per image the
sha256 of its photo, its mask and the PNG written (for a mixed variant, the sha256 of the digests, one per
line). A rendered image is kept on resume only while all three still hold, so a changed photo, mask or PNG is
rendered again. Reading, appending, rewriting and claiming are :mod:`bgbias.ledger`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bgbias.corrupted.manifest_schema import Sha256
from bgbias.ledger import Ledger
from bgbias.schema import ClosedRecord, format_header

LEDGER_NAME = "render.jsonl"
LEDGER_FORMAT = "bgbias-corrupted-render"


class RenderRecord(ClosedRecord):
    """What one rendered image was made from (image and mask file digests) and what was written (PNG); a
    ledger line with any other field, or without one of these, is no record (its image is rendered again)."""

    id: str
    image_sha256: Sha256
    mask_sha256: Sha256
    png_sha256: Sha256


def ledger_header(manifest_sha256: str) -> dict[str, Any]:
    """The first line: the folder renders the manifest with this digest and no other."""
    return {**format_header(LEDGER_FORMAT), "manifest_sha256": manifest_sha256}


RENDER_LEDGER: Ledger[RenderRecord] = Ledger(RenderRecord.model_dump, RenderRecord.model_validate,
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
