"""Where corrupted-set manifests are kept: files, as ``bgbias corrupt`` writes them, or, inside
:func:`manifests_in_memory`, this process's memory.

A Python caller who asked for no files (``bgbias.evaluate`` without ``out=``) still needs the manifests, so
they are made exactly as on disk (the same bytes, so the same sha256 in its report and its cache keys) and
kept in memory under the path they would have had: a second call in the same process, after the next epoch
of training say, finds them there. A manifest already on disk is read from disk in either mode.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from bgbias.fileio import write_text_atomic

_KEPT: dict[str, bytes] = {}
"""Manifests made in memory in this process, by absolute path."""

_IN_MEMORY: ContextVar[bool] = ContextVar("manifests_in_memory", default=False)


@contextmanager
def manifests_in_memory() -> Iterator[None]:
    """Within this block, manifests that are made go to memory, not to files."""
    token = _IN_MEMORY.set(True)
    try:
        yield
    finally:
        _IN_MEMORY.reset(token)


def manifest_exists(path: Path) -> bool:
    """Whether the manifest at ``path`` exists, on disk or (inside :func:`manifests_in_memory`) in memory."""
    return (_IN_MEMORY.get() and _key(path) in _KEPT) or path.is_file()


def read_manifest_bytes(path: Path) -> bytes:
    """The manifest's bytes, from disk where the file is, else from memory (inside
    :func:`manifests_in_memory`); ``FileNotFoundError`` where neither holds it."""
    if _IN_MEMORY.get() and not path.is_file() and _key(path) in _KEPT:
        return _KEPT[_key(path)]
    return path.read_bytes()


def write_manifest(path: Path, text: str) -> None:
    """Write the manifest to ``path`` atomically, or keep it in memory inside :func:`manifests_in_memory`."""
    if _IN_MEMORY.get():
        _KEPT[_key(path)] = text.encode("utf-8")
    else:
        write_text_atomic(path, text)


def _key(path: Path) -> str:
    return os.path.abspath(path)
