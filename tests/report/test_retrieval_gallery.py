"""The retrieval gallery (the paper's Fig. 1): tiles and frames where the layout says, checks, same bytes."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from bgbias.errors import OptionError
from bgbias.report.retrieval_gallery import (
    CORRECT,
    WRONG,
    GalleryQuery,
    retrieval_gallery_image,
    write_retrieval_gallery,
)

CELL = 40
LABEL_W, GAP, TEXT, QUERY_GAP = 64, 4, 14, 14


def _solid(value: int, side: int = 12) -> np.ndarray:
    return np.full((side, side + 3, 3), (value, 255 - value, 128), dtype=np.uint8)


def _query(index: int, k: int = 3) -> GalleryQuery:
    return GalleryQuery(
        caption=f"query {index}: clean AP 1.00, corrupted AP 0.33",
        clean_query=_solid(10 + index),
        clean_neighbours=[_solid(50 + 10 * n + index) for n in range(k)],
        clean_correct=[True] * k,
        corrupted_query=_solid(120 + index),
        corrupted_neighbours=[_solid(150 + 10 * n + index) for n in range(k)],
        corrupted_correct=[n % 2 == 0 for n in range(k)],
    )


def test_tiles_and_frames_land_where_the_layout_puts_them():
    queries = [_query(0), _query(1, k=2)]
    sheet = retrieval_gallery_image(queries, cell=CELL)
    first_neighbour = GAP + LABEL_W + CELL + QUERY_GAP
    block_h = TEXT + 2 * CELL + 3 * GAP
    assert sheet.size == (first_neighbour + 3 * (CELL + GAP), TEXT + GAP + 2 * block_h)
    pixels = np.asarray(sheet)
    for index, query in enumerate(queries):
        for row, (image, neighbours, correct) in enumerate(query.rows()):
            y = TEXT + GAP + index * block_h + TEXT + row * (CELL + GAP)
            centre = CELL // 2
            assert tuple(pixels[y + centre, GAP + LABEL_W + centre]) == tuple(image[0, 0])
            for rank, (neighbour, hit) in enumerate(zip(neighbours, correct, strict=True)):
                x = first_neighbour + rank * (CELL + GAP)
                assert tuple(pixels[y + centre, x + centre]) == tuple(neighbour[0, 0])
                frame = CORRECT if hit else WRONG
                assert tuple(pixels[y, x + centre]) == frame and tuple(pixels[y + centre, x + 1]) == frame
    # The second query has two neighbours: the third place stays blank paper.
    y = TEXT + GAP + block_h + TEXT + CELL // 2
    assert tuple(pixels[y, first_neighbour + 2 * (CELL + GAP) + CELL // 2]) == (255, 255, 255)


def test_bad_queries_are_refused():
    with pytest.raises(OptionError, match="at least one query"):
        retrieval_gallery_image([])
    broken = _query(0)
    with pytest.raises(OptionError, match="3 corrupted neighbours but 2"):
        retrieval_gallery_image([GalleryQuery(**{**vars(broken), "corrupted_correct": [True, False]})])
    with pytest.raises(OptionError, match=r"\(H, W, 3\) uint8"):
        retrieval_gallery_image([GalleryQuery(**{**vars(broken), "clean_query": np.zeros((8, 8), np.uint8)})])


def test_long_captions_are_cut_to_the_sheet():
    long = GalleryQuery(**{**vars(_query(0, k=1)), "caption": "x" * 500})
    sheet = np.asarray(retrieval_gallery_image([long], cell=CELL))
    caption_strip = sheet[TEXT + GAP:TEXT + GAP + TEXT]
    assert (caption_strip[:, GAP:GAP + 40] < 128).any()  # the caption is written...
    assert (caption_strip[:, -GAP:] == 255).all()  # ...and cut before the right margin


def test_written_gallery_is_a_png_with_stable_bytes(tmp_path):
    a = write_retrieval_gallery(tmp_path / "a.png", [_query(0), _query(1)])
    b = write_retrieval_gallery(tmp_path / "b.png", [_query(0), _query(1)])
    assert a.read_bytes() == b.read_bytes()
    assert Image.open(a).format == "PNG"
