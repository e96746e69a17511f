"""The retrieval gallery (the paper's Fig. 1, the leakage meter's classes): tiles and frames where the layout
says, for any number of rows, checks, same bytes."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from bgbias.errors import OptionError
from bgbias.retrieval.gallery import (
    CORRECT,
    WRONG,
    GalleryQuery,
    GalleryRow,
    retrieval_gallery_image,
    write_retrieval_gallery,
)

CELL = 40
LABEL_W, GAP, TEXT, QUERY_GAP = 64, 4, 14, 14


def _solid(value: int, side: int = 12) -> np.ndarray:
    value %= 256
    return np.full((side, side + 3, 3), (value, 255 - value, 128), dtype=np.uint8)


def _query(index: int, k: int = 3, rows: int = 2) -> GalleryQuery:
    return GalleryQuery(
        caption=f"query {index}: clean AP 1.00, corrupted AP 0.33",
        rows=tuple(GalleryRow(f"row {row}", _solid(10 + 110 * row + index),
                              [_solid(50 + 100 * row + 10 * n + index) for n in range(k)],
                              [row == 0 or n % 2 == 0 for n in range(k)]) for row in range(rows)),
    )


def test_tiles_and_frames_land_where_the_layout_puts_them():
    queries = [_query(0), _query(1, k=2)]
    sheet = retrieval_gallery_image(queries, cell=CELL)
    first_neighbour = GAP + LABEL_W + CELL + QUERY_GAP
    block_h = TEXT + 2 * CELL + 3 * GAP
    assert sheet.size == (first_neighbour + 3 * (CELL + GAP), TEXT + GAP + 2 * block_h)
    pixels = np.asarray(sheet)
    for index, query in enumerate(queries):
        for row_index, row in enumerate(query.rows):
            y = TEXT + GAP + index * block_h + TEXT + row_index * (CELL + GAP)
            centre = CELL // 2
            assert tuple(pixels[y + centre, GAP + LABEL_W + centre]) == tuple(row.query[0, 0])
            for rank, (neighbour, hit) in enumerate(zip(row.neighbours, row.correct, strict=True)):
                x = first_neighbour + rank * (CELL + GAP)
                assert tuple(pixels[y + centre, x + centre]) == tuple(neighbour[0, 0])
                frame = CORRECT if hit else WRONG
                assert tuple(pixels[y, x + centre]) == frame and tuple(pixels[y + centre, x + 1]) == frame
    # The second query has two neighbours: the third place stays blank paper.
    y = TEXT + GAP + block_h + TEXT + CELL // 2
    assert tuple(pixels[y, first_neighbour + 2 * (CELL + GAP) + CELL // 2]) == (255, 255, 255)


def test_blocks_of_any_number_of_rows_stack_one_under_another():
    queries = [_query(0, rows=3), _query(1, rows=1)]
    sheet = np.asarray(retrieval_gallery_image(queries, cell=CELL))
    heights = [TEXT + rows * (CELL + GAP) + GAP for rows in (3, 1)]
    assert sheet.shape[0] == TEXT + GAP + sum(heights)
    centre = CELL // 2
    third_row = TEXT + GAP + TEXT + 2 * (CELL + GAP) + centre
    assert tuple(sheet[third_row, GAP + LABEL_W + centre]) == tuple(queries[0].rows[2].query[0, 0])
    second_block = TEXT + GAP + heights[0] + TEXT + centre
    assert tuple(sheet[second_block, GAP + LABEL_W + centre]) == tuple(queries[1].rows[0].query[0, 0])


def test_bad_queries_are_refused():
    with pytest.raises(OptionError, match="at least one query"):
        retrieval_gallery_image([])
    broken = _query(0)
    second = broken.rows[1]
    with pytest.raises(OptionError, match="3 row 1 neighbours but 2"):
        retrieval_gallery_image([GalleryQuery(broken.caption, (broken.rows[0], GalleryRow(
            second.name, second.query, second.neighbours, [True, False])))])
    with pytest.raises(OptionError, match=r"\(H, W, 3\) uint8"):
        retrieval_gallery_image([GalleryQuery(broken.caption, (GalleryRow(
            "clean", np.zeros((8, 8), np.uint8), [], []),))])
    with pytest.raises(OptionError, match="has no rows"):
        retrieval_gallery_image([GalleryQuery("empty", ())])


def test_long_captions_are_cut_to_the_sheet():
    long = GalleryQuery("x" * 500, _query(0, k=1).rows)
    sheet = np.asarray(retrieval_gallery_image([long], cell=CELL))
    caption_strip = sheet[TEXT + GAP:TEXT + GAP + TEXT]
    assert (caption_strip[:, GAP:GAP + 40] < 128).any()  # the caption is written...
    assert (caption_strip[:, -GAP:] == 255).all()  # ...and cut before the right margin


def test_written_gallery_is_a_png_with_stable_bytes(tmp_path):
    a = write_retrieval_gallery(tmp_path / "a.png", [_query(0), _query(1)])
    b = write_retrieval_gallery(tmp_path / "b.png", [_query(0), _query(1)])
    assert a.read_bytes() == b.read_bytes()
    assert Image.open(a).format == "PNG"
