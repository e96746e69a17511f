"""Atomic file and folder writes: a reader never sees a half-written file, and a killed writer leaves only a
temporary sibling that the next run replaces."""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from bgbias.errors import BusyError, output_error


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
    write_bytes_atomic(path, json_bytes(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"))


def json_bytes(text: str) -> bytes:
    """JSON text from ``json.dumps(..., ensure_ascii=False)`` as UTF-8 that never fails to encode.

    A file name that is not valid UTF-8 reaches Python as a str with lone surrogates, which UTF-8 cannot
    encode; each is written as its JSON escape (``\\udce9``), which ``json.loads`` reads back to the same str.
    (Outside strings ``json.dumps`` writes only ASCII, so every such escape lands inside a string.)
    """
    return text.encode("utf-8", "backslashreplace")


@contextlib.contextmanager
def exclusive_lock(
    path: str | os.PathLike[str], *, wait: bool, busy: BusyError | None = None
) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the file ``path`` for the block, between processes.

    The file is created if missing and never removed (removing it would let a later process lock a new file
    while another still holds the old one). The kernel drops the lock when its holder dies, so a killed run
    leaves nothing to clean up. ``wait=False``: if another process holds it, raise ``busy`` (a ``BusyError``
    that says who and what to do), or ``BlockingIOError`` without one.
    """
    path = Path(path)
    make_dirs(path.parent)
    with reporting_write_errors(path):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if busy is None:
                raise
            raise busy from None
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``path``; on success it replaces ``path`` as a whole. The folder
    gets the mode a new folder gets under the user's umask (``mkdtemp`` makes it private)."""
    path = Path(path)
    make_dirs(path.parent)
    with reporting_write_errors(path):
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
        tmp.chmod(0o777 & ~_umask())
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


def _umask() -> int:
    """The process's umask (read by setting it, then putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def sweep_stale_temps(paths: Iterable[Path], older_than: float = 0.0) -> int:
    """Remove the temporary siblings (``.<name>.*.tmp``, from :func:`atomic_path`) that a killed run left
    beside ``paths``; returns how many. Only these names are touched, so writers sharing a folder (mask
    shards) never remove each other's files in flight. Files that another process may be writing at this
    moment (corrupted-set manifests, shared by concurrent evaluations) pass ``older_than``: temporaries
    modified within that many seconds are spared, a live write taking milliseconds."""
    by_folder: dict[Path, set[str]] = defaultdict(set)
    for path in paths:
        by_folder[path.parent].add(path.name)
    cutoff = time.time() - older_than
    removed = 0
    for folder, names in by_folder.items():
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):  # nothing written there yet; writing will say why
            continue
        for entry in entries:
            if _temp_of(entry.name) in names and (older_than <= 0 or _modified(entry) < cutoff):
                Path(entry.path).unlink(missing_ok=True)
                removed += 1
    return removed


def _modified(entry: os.DirEntry[str]) -> float:
    try:
        return entry.stat().st_mtime
    except FileNotFoundError:  # its writer renamed it into place meanwhile
        return math.inf


def _temp_of(name: str) -> str | None:
    """The file a temporary ``.<name>.<random>.tmp`` stands for, else ``None``."""
    if not (name.startswith(".") and name.endswith(".tmp")):
        return None
    stem = name[1:-4]
    target, dot, _random = stem.rpartition(".")
    return target if dot else None
