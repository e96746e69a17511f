"""Where a background source image came from: the unit of provenance for every pool and bench background,
and the sources the installed background assets provide."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from bgbias.assets.catalog import CATALOG
from bgbias.assets.store import Catalog, check_asset, install_root, resolve_home


@dataclass(frozen=True)
class PhotoSource:
    """One source image that backgrounds are cropped from; ``family`` groups the variants of one picture,
    which never straddle two pools (the pools stay disjoint in content)."""

    path: Path
    origin: str  # e.g. "deb:mate-backgrounds=1.26.0-1:usr/share/backgrounds/mate/nature/Garden.jpg"
    licence: str  # SPDX identifier, e.g. "GPL-2.0-or-later", "CC-BY-SA-4.0", "CC0-1.0"
    kind: Literal["photo", "pattern"]
    family: str


def background_sources(
    home: str | os.PathLike[str] | None = None, *, catalog: Catalog = CATALOG
) -> list[PhotoSource]:
    """Every background image of the installed background assets, with origin, licence, kind and family."""
    resolved = resolve_home(home)
    sources = []
    for spec in catalog.values():
        if not spec.backgrounds or not check_asset(spec, resolved, verify=False).present:
            continue
        root = install_root(spec, resolved)
        for member in spec.backgrounds:
            info = member.background
            assert info is not None
            origin = f"{spec.source.describe()}:{member.source}"
            sources.append(PhotoSource(root / member.target, origin, info.licence, info.kind, info.family))
    return sources
