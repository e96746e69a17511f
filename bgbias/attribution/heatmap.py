"""Attribution maps for a person to look at: a colour overlay per image and a gallery sheet (PIL, numpy).

A score says how much attribution falls on the object; only the map shows where the rest goes (a sky, a
road, the image border). The overlay greys the photo so the colours belong to the map alone, and uses a
perceptually ordered ramp (black, purple, red, orange, pale yellow, after matplotlib's "inferno") so that
brighter always means more attribution, also in greyscale print.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from bgbias.figures import INK, PAPER, SHEET_GAP, SHEET_TEXT, one_line
from bgbias.fileio import atomic_file

_RAMP_STOPS = np.array([0.0, 0.25, 0.5, 0.75, 1.0])
_RAMP_COLOURS = np.array(
    [(0, 0, 4), (87, 16, 110), (188, 55, 84), (249, 142, 9), (252, 255, 164)], dtype=np.float64
)
_COLOUR_WEIGHT = 0.6
"""How much of an overlay pixel is the map's colour; the rest is the greyed photo."""

_CHAR_PX = 6


def colour_ramp(values: np.ndarray) -> np.ndarray:
    """Values in [0, 1] (any shape) -> uint8 RGB colours (shape + (3,)); out-of-range values are clipped and
    NaN counts as 0."""
    values = np.clip(np.nan_to_num(np.asarray(values, dtype=np.float64)), 0.0, 1.0)
    channels = [np.interp(values, _RAMP_STOPS, _RAMP_COLOURS[:, c]) for c in range(3)]
    return np.rint(np.stack(channels, axis=-1)).astype(np.uint8)


def overlay(image: np.ndarray, attribution: np.ndarray) -> np.ndarray:
    """The map's colours blended over a greyed copy of ``image`` (uint8 H×W×3); ``attribution`` is H×W in
    [0, 1]. Returns uint8 H×W×3."""
    image = np.asarray(image)
    attribution = np.asarray(attribution)
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f"expected a uint8 (H, W, 3) image, got {image.dtype} {image.shape}")
    if attribution.shape != image.shape[:2]:
        raise ValueError(f"attribution of shape {attribution.shape} does not fit an image of {image.shape}")
    grey = image.astype(np.float64) @ np.array([0.299, 0.587, 0.114])
    blended = (1 - _COLOUR_WEIGHT) * grey[..., None] + _COLOUR_WEIGHT * colour_ramp(attribution)
    return np.rint(blended).clip(0, 255).astype(np.uint8)


def attribution_gallery_image(
    images: Sequence[np.ndarray],
    masks: Sequence[np.ndarray],
    maps_by_model: Mapping[str, Sequence[np.ndarray]],
    captions: Sequence[str],
    cell: int = 128,
    extra_columns: Mapping[str, Sequence[np.ndarray]] | None = None,
) -> Image.Image:
    """One row per image: image | mask | an overlay per model, in cells ``cell`` px square.

    Column headers name the models (on more lines where one is wider than its column); each row's caption
    (e.g. the id and each model's score) is written under it. ``images`` are uint8 H×W×3, ``masks`` uint8
    H×W, maps H×W in [0, 1], one list per model. ``extra_columns`` (header → one uint8 H×W×3 picture per
    row, any size) come after the overlays: a reference image and the overlay of its map, for an attribution
    that explains an image against another.
    """
    extra_columns = extra_columns or {}
    rows = len(images)
    if rows == 0:
        raise ValueError("a gallery needs at least one image")
    lengths = {"masks": len(masks), "captions": len(captions)}
    lengths.update({f"maps of {name}": len(maps) for name, maps in maps_by_model.items()})
    lengths.update({f"pictures of {name}": len(pictures) for name, pictures in extra_columns.items()})
    wrong = {what: n for what, n in lengths.items() if n != rows}
    if wrong:
        raise ValueError(f"{rows} images but {', '.join(f'{n} {what}' for what, n in wrong.items())}")
    headers = ["image", "mask", *maps_by_model, *extra_columns]
    width = len(headers) * (cell + SHEET_GAP) + SHEET_GAP
    row_height = cell + SHEET_TEXT + SHEET_GAP
    font = ImageFont.load_default()
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    titles = [_wrap(measure, header, cell, font) for header in headers]
    title_height = SHEET_TEXT * max(map(len, titles))
    sheet = Image.new("RGB", (width, title_height + SHEET_GAP + rows * row_height), PAPER)
    draw = ImageDraw.Draw(sheet)
    for column, lines in enumerate(titles):
        for line, text in enumerate(lines):
            draw.text((SHEET_GAP + column * (cell + SHEET_GAP), 1 + line * SHEET_TEXT), text, fill=INK,
                      font=font)
    for row in range(rows):
        top = title_height + SHEET_GAP + row * row_height
        overlays = [overlay(images[row], maps[row]) for maps in maps_by_model.values()]
        extras = [pictures[row] for pictures in extra_columns.values()]
        for column, tile in enumerate([images[row], masks[row], *overlays, *extras]):
            picture = Image.fromarray(np.asarray(tile, dtype=np.uint8)).convert("RGB")
            picture = picture.resize((cell, cell), Image.Resampling.BILINEAR)
            sheet.paste(picture, (SHEET_GAP + column * (cell + SHEET_GAP), top))
        caption = _shorten(captions[row], width - 2 * SHEET_GAP)
        draw.text((SHEET_GAP, top + cell + 1), caption, fill=INK, font=font)
    return sheet


def attribution_gallery(
    path: Path,
    images: Sequence[np.ndarray],
    masks: Sequence[np.ndarray],
    maps_by_model: Mapping[str, Sequence[np.ndarray]],
    captions: Sequence[str],
    cell: int = 128,
    extra_columns: Mapping[str, Sequence[np.ndarray]] | None = None,
) -> Path:
    """Save :func:`attribution_gallery_image` as a PNG, atomically."""
    sheet = attribution_gallery_image(images, masks, maps_by_model, captions, cell, extra_columns)
    with atomic_file(path) as handle:
        sheet.save(handle, format="PNG")
    return Path(path)


def _wrap(draw: ImageDraw.ImageDraw, text: str, width: int, font: ImageFont.ImageFont) -> list[str]:
    """``text`` (a column's title) in as many lines as it takes to fit ``width`` pixels, broken at spaces (a
    word wider than a line at a character): a title names a run, so none is cut short ("multi_similarity +
    BGAugment" beside "multi_similarity")."""
    lines: list[str] = []
    current = ""
    for word in one_line(text).split(" "):
        joined = f"{current} {word}" if current else word
        if draw.textlength(joined, font=font) <= width:
            current = joined
            continue
        if current:
            lines.append(current)
        current = word
        while draw.textlength(current, font=font) > width:
            fits = max((end for end in range(1, len(current))
                        if draw.textlength(current[:end], font=font) <= width), default=1)
            lines.append(current[:fits])
            current = current[fits:]
    return [*lines, current]


def _shorten(text: str, width: int) -> str:
    """Cut the middle out of ``text`` so it fits ``width`` pixels of PIL's default font, keeping both ends
    (an id's folder and file name, a caption's first and last scores). ASCII "..." only: the default font
    has no ellipsis. Line breaks are shown as their escapes (:func:`~bgbias.figures.one_line`)."""
    text = one_line(text)
    room = max(5, width // _CHAR_PX)
    if len(text) <= room:
        return text
    head = (room - 3 + 1) // 2
    return text[:head] + "..." + text[len(text) - (room - 3 - head):]
