"""Atomic file and folder writes: a reader never sees a half-written file, and a killed writer leaves only a
temporary sibling that the next run replaces. Outputs get the modes the user's umask gives any new file, and
every error met while writing one (a full disk, no permission) is an ``OutputError`` naming it."""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import os
import shutil
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import filelock

from bgbias.errors import BusyError, output_error


def _umask_at_import() -> int:
    """The umask, read by setting it and setting it back: only safe while no other thread creates files,
    which holds when bgbias is imported (it starts no thread on import)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


_UMASK_AT_IMPORT = _umask_at_import()


def current_umask() -> int:
    """The process's umask, read without changing it: from ``/proc/self/status`` where the system has it
    (Linux 4.7 and later), so the umask of the moment is followed without the set-and-restore of
    ``os.umask``, which would give a file that another thread creates in between the wrong mode (masks are
    written from worker threads); elsewhere the umask as it was when this module was imported."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return _UMASK_AT_IMPORT


def file_mode() -> int:
    """The mode of a new file under the current umask (``0o666 & ~umask``: 0644 under 022), which
    ``mkstemp``'s private 0600 would otherwise keep through the rename."""
    return 0o666 & ~current_umask()


def folder_mode() -> int:
    """The mode of a new folder under the current umask (``0o777 & ~umask``), in place of ``mkdtemp``'s
    0700."""
    return 0o777 & ~current_umask()


@contextlib.contextmanager
def reporting_write_errors(path: str | os.PathLike[str]) -> Iterator[None]:
    """Turn an ``OSError`` met while writing ``path`` into an ``OutputError`` that names it and the fix;
    also one that a writer's clean-up replaced by an error of its own (``torch.save`` on a full disk ends in
    "RuntimeError: ... unexpected pos" raised while the ``OSError`` was being handled)."""
    try:
        yield
    except OSError as error:
        raise output_error(error, path) from error
    except Exception as error:
        cause = _os_error_behind(error)
        if cause is None:
            raise
        raise output_error(cause, path) from error


def _os_error_behind(error: BaseException) -> OSError | None:
    """The ``OSError`` that ``error`` was raised while handling (directly or further back), if any."""
    seen = {id(error)}
    context = error.__context__
    while context is not None and id(context) not in seen:
        if isinstance(context, OSError):
            return context
        seen.add(id(context))
        context = context.__context__
    return None


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
        with reporting_write_errors(path):
            tmp_path.chmod(file_mode())
        yield tmp_path
        with reporting_write_errors(path):
            os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """A binary file to write ``path``'s content into, which replaces ``path`` when the block ends without an
    error; an ``OSError`` while writing or closing it (a full disk) is an ``OutputError`` naming ``path``.
    For writers that need a file object (``torch.save``); the block should only write."""
    with atomic_path(path) as tmp, reporting_write_errors(path), open(tmp, "wb") as handle:
        yield handle


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_file(path) as handle:
        handle.write(data)


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


_HELD: set[tuple[str, int]] = set()
"""The locks this process holds, by (path, thread): a nested hold of the same lock on the same thread does
not lock again, which on a second file handle would wait for (or be refused by) itself. Each key is only
ever touched by its own thread."""


@contextlib.contextmanager
def exclusive_lock(
    path: str | os.PathLike[str], *, wait: bool, busy: BusyError | None = None
) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` for the block, between processes (``filelock``'s native
    lock: ``flock`` on POSIX, ``msvcrt.locking`` on Windows).

    The file is created if missing and not removed (removing it would let a later process lock a new file
    while another still holds the old one). The system drops the lock when its holder dies, so a killed run
    leaves nothing to clean up; a soft lock (a marker file) would not, so it is never used. Holding it again
    on the same thread inside the block is allowed. ``wait=False``: if another process (or thread) holds it,
    raise ``busy`` (a ``BusyError`` that says who and what to do), or ``BlockingIOError`` without one.
    """
    path = Path(path)
    key = (os.path.abspath(path), threading.get_ident())
    if key in _HELD:  # the enclosing hold releases it
        yield
        return
    make_dirs(path.parent)
    lock, taken = _native_lock(path), True
    with reporting_write_errors(path):
        try:
            lock.acquire(timeout=-1 if wait else 0)
        except filelock.Timeout:  # another holder has it: an OSError, but no write error
            taken = False
    if not taken:
        if busy is None:
            raise BlockingIOError(f"another process holds the lock {path}")
        raise busy
    _HELD.add(key)
    try:
        yield
    finally:
        _HELD.discard(key)
        lock.release()


def folder_lock_path(folder: str | os.PathLike[str]) -> Path:
    """The lock of a folder that processes build or write as a whole: ``.<name>.lock`` beside it (not in it,
    since some such folders are replaced whole)."""
    folder = Path(folder)
    return folder.parent / f".{folder.name}.lock"


def is_lock_file(name: str) -> bool:
    """Whether ``name`` is one of bgbias's lock files (``.<name>.lock``, ``.training.lock``): kept for good,
    they hold nothing a reader could lose."""
    return name.startswith(".") and name.endswith(".lock")


def holds_files(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` (or a folder inside it) holds a file other than a lock (:func:`is_lock_file`): a
    folder where a process only took its locks, or made empty folders, before it failed holds nothing, and a
    command that wants a new or empty folder takes it."""
    folder = Path(folder)
    if not folder.is_dir():
        return False
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            if holds_files(entry):
                return True
        elif not is_lock_file(entry.name):
            return True
    return False


def folder_lock(folder: str | os.PathLike[str]) -> contextlib.AbstractContextManager[None]:
    """Hold ``folder``'s lock (:func:`folder_lock_path`), waiting for another process that holds it: for
    shared folders that a second process should find built (the assets, the pools, the bench), not build at
    the same time."""
    return exclusive_lock(folder_lock_path(folder), wait=True)


def _native_lock(path: Path) -> Any:
    """``filelock``'s lock of this system on ``path``, with the mode the umask gives a new file, and without
    the fallback to a soft lock that filelock 4 offers where a file system lacks ``flock``."""

    native = filelock.WindowsFileLock if os.name == "nt" else filelock.UnixFileLock
    options: dict[str, Any] = {"mode": file_mode()}
    if "fallback_to_soft" in inspect.signature(native).parameters:
        options["fallback_to_soft"] = False
    return native(str(path), **options)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``path``; on success it replaces ``path`` as a whole. The folder
    gets the mode a new folder gets under the user's umask (``mkdtemp`` makes it private)."""
    path = Path(path)
    make_dirs(path.parent)
    with reporting_write_errors(path):
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        with reporting_write_errors(path):
            tmp.chmod(folder_mode())
        yield tmp
        with reporting_write_errors(path):
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
