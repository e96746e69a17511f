"""Retrieval galleries (the paper's Fig. 1, the leakage meter's telling classes): each query block is a
caption and rows of a query image, a gap, and its top-k neighbours, framed green when of the query's class and
red when not. PIL only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from bgbias.errors import OptionError
from bgbias.figures import INK, PAPER, SHEET_GAP, SHEET_TEXT, one_line
from bgbias.fileio import atomic_file

CORRECT = (30, 150, 60)
WRONG = (210, 40, 40)
_LABEL_W = 64
_QUERY_GAP = 14


@dataclass(frozen=True, eq=False)
class GalleryRow:
    """One row of a query block: its ``name`` (drawn at the left), the query image (H, W, 3) uint8, its top-k
    neighbour images (nearest first) and whether each neighbour is of the query's class."""

    name: str
    query: np.ndarray
    neighbours: list[np.ndarray]
    correct: list[bool]

    @classmethod
    def ranked(cls, name: str, pixels: Callable[[int], np.ndarray], labels: np.ndarray, query: int,
               nearest: Sequence[int]) -> GalleryRow:
        """Image ``query`` and its ``nearest`` (indices, nearest first), their pictures from ``pixels``, each
        framed by whether its label is the query's."""
        nearest = [int(n) for n in nearest]
        return cls(name, pixels(query), [pixels(n) for n in nearest],
                   [bool(labels[n] == labels[query]) for n in nearest])


@dataclass(frozen=True, eq=False)
class GalleryQuery:
    """One block of the sheet: a caption line over its rows (the evaluation's: "clean" and "corrupted")."""

    caption: str
    rows: tuple[GalleryRow, ...]


def retrieval_gallery_image(queries: Sequence[GalleryQuery], cell: int = 96) -> Image.Image:
    """Draw every query as a caption line over its rows of ``cell`` px square tiles."""
    _check_queries(queries)
    k = max(len(row.neighbours) for query in queries for row in query.rows)
    first_neighbour = SHEET_GAP + _LABEL_W + cell + _QUERY_GAP
    heights = [SHEET_TEXT + len(query.rows) * (cell + SHEET_GAP) + SHEET_GAP for query in queries]
    width = first_neighbour + max(1, k) * (cell + SHEET_GAP)
    sheet = Image.new("RGB", (width, SHEET_TEXT + SHEET_GAP + sum(heights)), PAPER)
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default()
    draw.text((SHEET_GAP + _LABEL_W, 1), "query", fill=INK, font=font)
    heading = "neighbours (green: same class, red: other)"
    draw.text((first_neighbour, 1), _fit(draw, heading, width - first_neighbour, font), fill=INK, font=font)
    frame = max(2, cell // 24)
    top = SHEET_TEXT + SHEET_GAP
    for query, height in zip(queries, heights, strict=True):
        caption = _fit(draw, query.caption, width - 2 * SHEET_GAP, font)
        draw.text((SHEET_GAP, top + 1), caption, fill=INK, font=font)
        for index, row in enumerate(query.rows):
            y = top + SHEET_TEXT + index * (cell + SHEET_GAP)
            name = _fit(draw, row.name, _LABEL_W - SHEET_GAP, font)
            draw.text((SHEET_GAP, y + cell // 2 - 6), name, fill=INK, font=font)
            sheet.paste(_tile(row.query, cell), (SHEET_GAP + _LABEL_W, y))
            for rank, (neighbour, hit) in enumerate(zip(row.neighbours, row.correct, strict=True)):
                x = first_neighbour + rank * (cell + SHEET_GAP)
                sheet.paste(_tile(neighbour, cell), (x, y))
                colour = CORRECT if hit else WRONG
                draw.rectangle((x, y, x + cell - 1, y + cell - 1), outline=colour, width=frame)
        top += height
    return sheet


def write_retrieval_gallery(
    path: str | os.PathLike[str], queries: Sequence[GalleryQuery], cell: int = 96
) -> Path:
    """Save :func:`retrieval_gallery_image` as a PNG, atomically."""
    with atomic_file(path) as handle:
        retrieval_gallery_image(queries, cell).save(handle, format="PNG")
    return Path(path)


def _check_queries(queries: Sequence[GalleryQuery]) -> None:
    if not queries:
        raise OptionError("a retrieval gallery needs at least one query", fix="pass one or more GalleryQuery")
    for query in queries:
        if not query.rows:
            raise OptionError(f"query {query.caption!r} has no rows", fix="pass one GalleryRow or more")
        for row in query.rows:
            if len(row.neighbours) != len(row.correct):
                raise OptionError(
                    f"query {query.caption!r}: {len(row.neighbours)} {row.name} neighbours but "
                    f"{len(row.correct)} correctness flags", fix="pass one flag per neighbour")
            for array in map(np.asarray, (row.query, *row.neighbours)):
                if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] != 3:
                    raise OptionError(
                        f"query {query.caption!r}: a {row.name} image is {array.dtype} of shape "
                        f"{array.shape}", fix="pass (H, W, 3) uint8 RGB arrays")


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
