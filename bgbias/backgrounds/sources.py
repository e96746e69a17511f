"""Where a background source image came from: the unit of provenance for every pool and bench background."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal


@dataclass(frozen=True)
class PhotoSource:
    """One source image that backgrounds are cropped from.

    ``family`` names images that are variants of one picture (the light and dark version of a wallpaper, the
    same photo at several sizes): a family never straddles two pools, so the pools stay disjoint in content.
    """

    path: Path
    origin: str  # e.g. "deb:mate-backgrounds=1.26.0-1:usr/share/backgrounds/mate/nature/Garden.jpg"
    licence: str  # SPDX identifier, e.g. "GPL-2.0-or-later", "CC-BY-SA-4.0", "CC0-1.0"
    kind: Literal["photo", "pattern"]
    family: str
