"""Which Tux Paint stamps become bench classes: real photographs cut out with an exact alpha channel. The
rules are the bench prototype's (docs/bench-dataset.md, *Stamps*); on Debian's tuxpaint-stamps-default
2022.06.04-1 they leave 248 classes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from bgbias.errors import AssetError, ImageError

EXCLUDED_CATEGORIES = frozenset({"symbols", "seasonal", "town", "clothes"})
"""Top-level stamp folders holding drawings, flags, signs and letters rather than photographs."""

EXCLUDED_FOLDER = "cartoon"
"""Any folder of this name holds drawings."""

MIRROR_SUFFIX = "_mirror.png"
"""Tux Paint's pre-flipped copy of a stamp: the same photograph again."""

LINE_ART_FLAGS = ("colorable", "tintable")
"""``.dat`` flags of stamps meant to be recoloured: line art. Matched as substrings, because one ``.dat``
in the package runs two flags together ("nomirrorcolorable")."""

MIN_LONG_SIDE = 100
"""Smallest accepted long side (px) of the stamp's opaque bounding box."""

OPAQUE_ALPHA = 128
"""Alpha from which a pixel counts as part of the object when measuring the bounding box."""

REJECTED = frozenset({
    "food/pizza.png", "household/dishes/glass.png", "plants/trees/birch.png", "space/planets/0_sun.png",
    "space/planets/1_mercury.png", "medical/tooth.png", "animals/insects/fly.png",
    "animals/mammals/hedgehog.png", "sports/rugby_goal_posts.png", "vehicles/7spoke256.png",
    "vehicles/emergency/sedan_police.png", "people/body_parts/eye.png",
    "people/fireman240a.png",  # duplicate of military/fireman240a.png
})
"""Stamps that pass every rule but were seen on a contact sheet to be drawings, renders, duplicates or
broken."""


@dataclass(frozen=True)
class Stamp:
    """One selected stamp: a bench class."""

    path: Path
    relpath: str  # posix path under the stamps root, e.g. "animals/birds/robin.png"
    class_name: str  # relpath without ".png", "/" replaced by ".", e.g. "animals.birds.robin"
    long_side: int  # of the opaque bounding box, in pixels


def select_stamps(stamps_root: str | os.PathLike[str]) -> list[Stamp]:
    """The stamps under ``stamps_root`` that pass every rule, sorted by relative path."""
    root = Path(stamps_root)
    if not root.is_dir():
        raise AssetError(
            "Tux Paint stamps folder not found",
            path=root,
            fix="install the stamps with `bgbias assets fetch tuxpaint_stamps`, or point at the folder with "
                "<category>/.../*.png",
        )
    selected = []
    for path in sorted(root.rglob("*.png")):
        relpath = path.relative_to(root).as_posix()
        if not _passes_name_rules(relpath) or _is_line_art(path):
            continue
        long_side = opaque_long_side(load_stamp(path))
        if long_side >= MIN_LONG_SIDE:
            selected.append(Stamp(path, relpath, class_name_of(relpath), long_side))
    if not selected:
        raise AssetError(
            "no usable photo stamps found (none passes the folder, flag and size rules)",
            path=root,
            fix="point at the stamps root of tuxpaint-stamps-default (…/share/tuxpaint/stamps), "
            "not at one of its sub-folders or at another package",
        )
    return selected


def load_stamp(path: str | os.PathLike[str]) -> np.ndarray:
    """A stamp as an (H, W, 4) uint8 RGBA array; palette and grey stamps keep their transparency."""
    try:
        with Image.open(path) as image:
            return np.asarray(image.convert("RGBA"))
    except (OSError, SyntaxError, ValueError) as exc:
        raise ImageError(
            f"stamp image cannot be read ({exc})", path=path,
            fix="fetch the stamps package again with `bgbias assets fetch tuxpaint_stamps --force`") from exc


def opaque_long_side(rgba: np.ndarray) -> int:
    """Long side of the bounding box of pixels with alpha ≥ ``OPAQUE_ALPHA`` (0 for an empty stamp)."""
    rows = np.flatnonzero((rgba[..., 3] >= OPAQUE_ALPHA).any(axis=1))
    cols = np.flatnonzero((rgba[..., 3] >= OPAQUE_ALPHA).any(axis=0))
    if rows.size == 0:
        return 0
    return int(max(rows[-1] - rows[0] + 1, cols[-1] - cols[0] + 1))


def class_name_of(relpath: str) -> str:
    """A class name that is unique, readable and safe as a folder name: the relative path with dots."""
    return relpath.removesuffix(".png").replace("/", ".")


def _passes_name_rules(relpath: str) -> bool:
    parts = relpath.split("/")
    return (
        parts[0] not in EXCLUDED_CATEGORIES
        and EXCLUDED_FOLDER not in parts[:-1]
        and not relpath.endswith(MIRROR_SUFFIX)
        and relpath not in REJECTED
    )


def _is_line_art(path: Path) -> bool:
    dat = path.with_suffix(".dat")
    if not dat.is_file():
        return False
    text = dat.read_text(encoding="utf-8", errors="replace").lower()
    return any(flag in text for flag in LINE_ART_FLAGS)
