"""A gallery of a corrupted set for a person to look at: rows of image | mask | corrupted image, PIL only.

Numbers cannot show a mask that cuts off a bird's head or a background crop that is all one colour; a sheet of
a few dozen rows can. Rows are laid out in side-by-side groups so the sheet stays roughly square. The rows of
a corrupted set are rendered by :func:`bgbias.corrupted.render.manifest_gallery`; other columns (one image in
every variant of the profile) by :func:`bgbias.variants.render_variants.variants_gallery`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from bgbias.figures import one_line

COLUMNS = ("image", "mask", "corrupted")
_GAP = 4
_CAPTION = 14
_PAPER = (255, 255, 255)
_INK = (20, 20, 20)

Row = Sequence[np.ndarray]
"""One ``uint8`` picture per column, (H, W, 3) or a mask (H, W): by default an image, its mask and its
corrupted image."""


def gallery_image(
    rows: Sequence[Row],
    captions: Sequence[str] | None = None,
    cell: int = 128,
    groups: int = 2,
    columns: Sequence[str] = COLUMNS,
) -> Image.Image:
    """Draw ``rows`` as ``groups`` side-by-side blocks of ``columns`` (image | mask | corrupted), cells
    ``cell`` px square, a caption (e.g. the image id) under each row, the column names heading each block."""
    if not rows:
        raise ValueError("a gallery needs at least one row")
    if captions is not None and len(captions) != len(rows):
        raise ValueError(f"{len(captions)} captions for {len(rows)} rows")
    if any(len(row) != len(columns) for row in rows):
        raise ValueError(f"every row needs one picture for each of the {len(columns)} columns")
    groups = max(1, min(groups, len(rows)))
    per_group = -(-len(rows) // groups)
    block_w = len(columns) * (cell + _GAP) + 3 * _GAP
    row_h = cell + _CAPTION + _GAP
    sheet = Image.new("RGB", (groups * block_w, _CAPTION + _GAP + per_group * row_h), _PAPER)
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default()
    for group in range(groups):
        for column, name in enumerate(columns):
            draw.text((group * block_w + column * (cell + _GAP) + _GAP, 1), name, fill=_INK, font=font)
    for index, row in enumerate(rows):
        group, slot = divmod(index, per_group)
        left, top = group * block_w, _CAPTION + _GAP + slot * row_h
        for column, array in enumerate(row):
            tile = Image.fromarray(np.asarray(array, dtype=np.uint8)).convert("RGB")
            tile = tile.resize((cell, cell), Image.Resampling.BILINEAR)
            sheet.paste(tile, (left + column * (cell + _GAP) + _GAP, top))
        if captions is not None:
            draw.text((left + _GAP, top + cell + 1), _fit(captions[index], block_w), fill=_INK, font=font)
    return sheet


def evenly_spread(count: int, wanted: int) -> list[int]:
    """Up to ``wanted`` positions spread evenly over ``count`` items, first and last included: a sample of a
    split that a person (or a quick score) can take as representative, the same every time."""
    if wanted <= 0 or count == 0:
        return []
    return sorted({round(position) for position in np.linspace(0, count - 1, min(wanted, count))})


def _fit(text: str, width: int, char_px: int = 6) -> str:
    """Shorten a caption from the left so it fits ``width`` pixels of the default font (ASCII only: the
    default font has no arrows or ellipses), line breaks shown as their escapes."""
    text = one_line(text)
    room = max(4, width // char_px)
    return text if len(text) <= room else "..." + text[-(room - 3):]
