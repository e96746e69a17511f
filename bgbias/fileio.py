"""Atomic file and folder writes: a reader never sees a half-written file, and a killed writer leaves only a
temporary sibling that the next run replaces."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bgbias.errors import output_error


@contextlib.contextmanager
def reporting_write_errors(path: str | os.PathLike[str]) -> Iterator[None]:
    """Turn an ``OSError`` met while writing ``path`` into an ``OutputError`` that names it and the fix."""
    try:
        yield
    except OSError as error:
        raise output_error(error, path) from error


def make_dirs(path: str | os.PathLike[str]) -> Path:
    """``mkdir -p path``, with a read-only disk or a file in the way reported as an ``OutputError``."""
    path = Path(path)
    with reporting_write_errors(path):
        path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it is renamed onto ``path``, on error removed.

    A folder that cannot be written (read-only, no permission, a file in the way) is an ``OutputError``."""
    path = Path(path)
    make_dirs(path.parent)
    with reporting_write_errors(path):
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with reporting_write_errors(path):
            os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_path(path) as tmp, reporting_write_errors(path):
        tmp.write_bytes(data)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    """Stable JSON (sorted keys, two-space indent, trailing newline) so equal content gives equal bytes."""
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``path``; on success it replaces ``path`` as a whole."""
    path = Path(path)
    make_dirs(path.parent)
    with reporting_write_errors(path):
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
