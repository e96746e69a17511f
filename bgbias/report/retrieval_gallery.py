"""The paper's Fig. 1 for any run: queries and their nearest neighbours, clean and with backgrounds replaced.

A drop in MAP@R says that retrieval got worse; this sheet shows how: whether the neighbours of a corrupted
query are now images that share its new background instead of its class. Each query takes two rows, "clean"
and "corrupted": the query, a gap, then its top-k neighbours (nearest first), each framed green when it is of
the query's class and red when it is not, under a caption line. PIL only.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from bgbias.errors import OptionError
from bgbias.figures import one_line
from bgbias.fileio import write_bytes_atomic

ROW_NAMES = ("clean", "corrupted")
CORRECT = (30, 150, 60)
WRONG = (210, 40, 40)
_GAP = 4
_TEXT = 14
_LABEL_W = 64
_QUERY_GAP = 14
_PAPER = (255, 255, 255)
_INK = (20, 20, 20)


@dataclass(frozen=True, eq=False)
class GalleryQuery:
    """One query of the sheet: its clean and corrupted image (H, W, 3) uint8, each with its top-k neighbour
    images (nearest first) and whether each neighbour is of the query's class."""

    caption: str
    clean_query: np.ndarray
    clean_neighbours: list[np.ndarray]
    clean_correct: list[bool]
    corrupted_query: np.ndarray
    corrupted_neighbours: list[np.ndarray]
    corrupted_correct: list[bool]

    def rows(self) -> list[tuple[np.ndarray, list[np.ndarray], list[bool]]]:
        """(query, neighbours, correct) of the clean row, then of the corrupted row."""
        return [(self.clean_query, self.clean_neighbours, self.clean_correct),
                (self.corrupted_query, self.corrupted_neighbours, self.corrupted_correct)]


def retrieval_gallery_image(queries: Sequence[GalleryQuery], cell: int = 96) -> Image.Image:
    """Draw every query as a caption line and a clean and a corrupted row of ``cell`` px square tiles."""
    _check_queries(queries)
    k = max(len(neighbours) for query in queries for _, neighbours, _ in query.rows())
    first_neighbour = _GAP + _LABEL_W + cell + _QUERY_GAP
    block_h = _TEXT + 2 * cell + 3 * _GAP
    width = first_neighbour + max(1, k) * (cell + _GAP)
    sheet = Image.new("RGB", (width, _TEXT + _GAP + len(queries) * block_h), _PAPER)
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default()
    draw.text((_GAP + _LABEL_W, 1), "query", fill=_INK, font=font)
    heading = "neighbours (green: same class, red: other)"
    draw.text((first_neighbour, 1), _fit(draw, heading, width - first_neighbour, font), fill=_INK, font=font)
    frame = max(2, cell // 24)
    for index, query in enumerate(queries):
        top = _TEXT + _GAP + index * block_h
        draw.text((_GAP, top + 1), _fit(draw, query.caption, width - 2 * _GAP, font), fill=_INK, font=font)
        for row, (name, (image, neighbours, correct)) in enumerate(zip(ROW_NAMES, query.rows(), strict=True)):
            y = top + _TEXT + row * (cell + _GAP)
            draw.text((_GAP, y + cell // 2 - 6), name, fill=_INK, font=font)
            sheet.paste(_tile(image, cell), (_GAP + _LABEL_W, y))
            for rank, (neighbour, hit) in enumerate(zip(neighbours, correct, strict=True)):
                x = first_neighbour + rank * (cell + _GAP)
                sheet.paste(_tile(neighbour, cell), (x, y))
                colour = CORRECT if hit else WRONG
                draw.rectangle((x, y, x + cell - 1, y + cell - 1), outline=colour, width=frame)
    return sheet


def write_retrieval_gallery(
    path: str | os.PathLike[str], queries: Sequence[GalleryQuery], cell: int = 96
) -> Path:
    """Save :func:`retrieval_gallery_image` as a PNG, atomically."""
    buffer = io.BytesIO()
    retrieval_gallery_image(queries, cell).save(buffer, format="PNG")
    write_bytes_atomic(path, buffer.getvalue())
    return Path(path)


def _check_queries(queries: Sequence[GalleryQuery]) -> None:
    if not queries:
        raise OptionError("a retrieval gallery needs at least one query", fix="pass one or more GalleryQuery")
    for query in queries:
        for name, (image, neighbours, correct) in zip(ROW_NAMES, query.rows(), strict=True):
            if len(neighbours) != len(correct):
                raise OptionError(
                    f"query {query.caption!r}: {len(neighbours)} {name} neighbours but {len(correct)} "
                    "correctness flags", fix="pass one flag per neighbour")
            for array in map(np.asarray, (image, *neighbours)):
                if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] != 3:
                    raise OptionError(
                        f"query {query.caption!r}: a {name} image is {array.dtype} of shape {array.shape}",
                        fix="pass (H, W, 3) uint8 RGB arrays")


def _tile(array: np.ndarray, cell: int) -> Image.Image:
    return Image.fromarray(np.asarray(array)).resize((cell, cell), Image.Resampling.BILINEAR)


def _fit(draw: ImageDraw.ImageDraw, text: str, width: int, font: ImageFont.ImageFont) -> str:
    """``text`` on one line, cut at the right end (marked by ``...``) so that it fits ``width`` pixels."""
    text = one_line(text)
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "...", font=font) > width:
        text = text[:-1]
    return text + "..."
