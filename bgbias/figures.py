"""Matplotlib figures as every plot of bgbias makes them: imported on first use (``bgbias --help`` stays
fast), a bare ``Figure`` rendered by Agg (no pyplot, so no global backend is switched and nothing opens a
window), fixed sizes and dpi, and PNGs without a software or date stamp, so the same data give the same bytes.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import TYPE_CHECKING

from bgbias.fileio import write_bytes_atomic

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 100


def one_line(text: str) -> str:
    """``text`` as a caption drawn on a picture: a line break or other control character (in an image's or a
    class folder's name) is shown as its escape (``\\n``), so a caption never spills over the picture below it
    nor stops PIL from measuring it."""
    return "".join(char if char.isprintable() else char.encode("unicode_escape").decode("ascii")
                   for char in text)


def new_figure(width: float, height: float) -> Figure:
    """An empty figure of ``width`` × ``height`` inches with a constrained layout."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def save_png(figure: Figure, path: str | os.PathLike[str]) -> Path:
    """Render to PNG without a software or date stamp (same figure, same bytes) and write atomically."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    write_bytes_atomic(path, buffer.getvalue())
    return Path(path)
