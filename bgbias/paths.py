"""Where bgbias reads and writes by default; an option or environment variable overrides each default.

Assets go to the user's cache folder; everything a command makes (datasets, pools, masks, corrupted sets,
runs) goes into the working folder, so one project folder holds one study wherever bgbias is installed
(docs/install.md, *Where files go*)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path, PurePath

import platformdirs


def bgbias_home() -> Path:
    """The cache for fetched assets and built data: ``$BGBIAS_HOME``, default the platform's user cache folder
    (``platformdirs.user_cache_path``: ``$XDG_CACHE_HOME/bgbias``, by default ``~/.cache/bgbias``, on Linux,
    ``~/Library/Caches/bgbias`` on macOS, ``%LOCALAPPDATA%\\bgbias\\Cache`` on Windows)."""
    env = os.environ.get("BGBIAS_HOME")
    return Path(env).expanduser() if env else platformdirs.user_cache_path("bgbias", appauthor=False)


def data_root() -> Path:
    """The folder holding datasets: ``$BGBIAS_DATA``, default ``./data``."""
    return Path(os.environ.get("BGBIAS_DATA", "data")).expanduser()


def masks_root() -> Path:
    """Default output of ``bgbias masks``: ``./masks`` (one sub-folder per dataset)."""
    return Path("masks")


def backgrounds_root() -> Path:
    """The background pools: ``./backgrounds`` with ``train/`` and ``test/``."""
    return Path("backgrounds")


def corrupted_root() -> Path:
    """Default home of the corrupted-test-set manifests: ``./corrupted``, beside ``./masks``."""
    return Path("corrupted")


def runs_root() -> Path:
    """Training runs and reports: ``./runs``."""
    return Path("runs")


def located_key(prefix: str, folder: str | os.PathLike[str]) -> str:
    """``<prefix>-<folder name>-<8 hex of its absolute path>``: a readable output-folder name for something
    known by where it lives (a user's dataset, a background pool), equal for the same folder and different
    for two folders of the same name."""
    folder = Path(folder).expanduser().resolve()
    digest = hashlib.sha256(os.fsencode(folder)).hexdigest()[:8]
    kept = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in folder.name).strip(".")
    return f"{prefix}-{kept[:40] or 'root'}-{digest}"


def leaves_folder(relative: str) -> str | None:
    """Why the relative path ``relative``, read from a file (an index, a table, a plan), would not name a
    place inside the folder it is joined to: it is empty, absolute (or has a drive), or has a ``..`` part;
    None when it stays inside. Decided from the text alone, as this system splits paths (links are not
    followed), so a path from untrusted input is checked before anything is read or written with it."""
    if relative in ("", "."):
        return "empty"
    parts = PurePath(relative)
    if parts.anchor:
        return "absolute"
    if ".." in parts.parts:
        return "climbs out with '..'"
    return None
