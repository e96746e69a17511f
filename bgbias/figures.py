"""Matplotlib figures as every plot of bgbias makes them: imported on first use (``bgbias --help`` stays
fast), a bare ``Figure`` rendered by Agg (no pyplot, so no global backend is switched and nothing opens a
window), fixed sizes and dpi, and PNGs without a software or date stamp, so the same data give the same bytes.
A figure is never saved cropped: one whose titles, labels or legend reach past its size is enlarged until
they fit (a one-method chart's four-entry legend is wider than its one group of bars).
"""

from __future__ import annotations

import io
import os
from pathlib import Path

from matplotlib.figure import Figure

from bgbias.fileio import write_bytes_atomic

DPI = 100

# The picture sheets (the retrieval and attribution galleries, drawn with PIL) share one look:
SHEET_GAP = 4
"""Pixels between two images of a sheet."""
SHEET_TEXT = 14
"""Height in pixels of a caption line."""
PAPER = (255, 255, 255)
INK = (20, 20, 20)
FIT_MARGIN = 0.1
"""Inches left beside the text of a figure that had to be enlarged to hold it."""
FIT_ROUNDS = 4
"""How often a figure is enlarged at most: its constrained layout moves the text again each time."""


def one_line(text: str) -> str:
    """``text`` as a caption drawn on a picture: a line break or other control character (in an image's or a
    class folder's name) is shown as its escape (``\\n``), so a caption never spills over the picture below it
    nor stops PIL from measuring it."""
    return "".join(char if char.isprintable() else char.encode("unicode_escape").decode("ascii")
                   for char in text)


def new_figure(width: float, height: float) -> Figure:
    """An empty figure of ``width`` × ``height`` inches with a constrained layout."""
    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def save_png(figure: Figure, path: str | os.PathLike[str], text: dict[str, str] | None = None) -> Path:
    """Render to PNG without a software or date stamp (same figure, same bytes) and write atomically; a
    figure whose contents reach past its edges is first enlarged until they fit (:func:`overflow`), so a
    figure that fits keeps its size and bytes. ``text`` goes into the PNG's text chunks (what it was drawn
    from)."""
    png = _render(figure, text)
    for _ in range(FIT_ROUNDS):
        left, bottom, right, top = overflow(figure)
        if max(left, bottom, right, top) <= 0:
            break
        width, height = figure.get_size_inches()
        grow_x = 2 * max(left, right, 0.0)  # constrained layout centres a legend or title: grow both sides
        grow_y = 2 * max(bottom, top, 0.0)
        figure.set_size_inches(width + grow_x + 2 * FIT_MARGIN * (grow_x > 0),
                               height + grow_y + 2 * FIT_MARGIN * (grow_y > 0))
        png = _render(figure, text)
    write_bytes_atomic(path, png)
    return Path(path)


def overflow(figure: Figure) -> tuple[float, float, float, float]:
    """How far (inches) the drawn contents of ``figure`` reach past its left, bottom, right and top edges, as
    last rendered; each is 0 or less where they stay inside."""
    width, height = figure.get_size_inches()
    drawn = figure.get_tightbbox()
    return -drawn.x0, -drawn.y0, drawn.x1 - width, drawn.y1 - height


def _render(figure: Figure, text: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, metadata={**(text or {}), "Software": None})
    return buffer.getvalue()
