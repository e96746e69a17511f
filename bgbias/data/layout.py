"""Checks every dataset layout shares: finding the root (and the folder the user probably meant), reading
whitespace-separated index files with line numbers, and finding listed files that are not on disk."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Iterator, Sequence, Set
from pathlib import Path
from typing import Literal

from bgbias.errors import DatasetError, SkippedEntriesWarning, is_utf8, printable_path

EXAMPLES_SHOWN = 5
"""How many offending paths an error message lists before it only gives the count."""


def locate_root(root: Path, index_file: str, obtain: str) -> Path:
    """Return ``root`` if it holds ``index_file`` (or exists, when ``index_file`` is empty); otherwise raise,
    suggesting a nearby folder that does hold it."""
    if not root.exists():
        raise DatasetError("dataset folder not found", path=root, fix=f"{obtain}, or pass the right folder")
    if not root.is_dir():
        raise DatasetError("dataset root is a file, not a folder", path=root, fix=f"pass a folder; {obtain}")
    if not index_file or (root / index_file).is_file():
        return root
    nearby = find_nearby_root(root, index_file)
    if nearby is not None:
        fix = f"pass {nearby} as the dataset root instead (it holds {index_file})"
    else:
        fix = f"{obtain}; the dataset root is the folder that holds {index_file}"
    raise DatasetError(f"no {index_file} in the dataset folder", path=root / index_file, fix=fix)


def find_nearby_root(root: Path, index_file: str) -> Path | None:
    """The closest folder holding ``index_file``: up to two levels above ``root`` (the user pointed inside the
    dataset) or below it (the user pointed at a folder of datasets, or at an archive's outer folder)."""
    children = subfolders(root)
    candidates = [root.parent, root.parent.parent, *children]
    for child in children:
        candidates += subfolders(child)
    return next((folder for folder in candidates if (folder / index_file).is_file()), None)


def subfolders(folder: Path) -> list[Path]:
    """Visible sub-folders of ``folder``, sorted; empty if it cannot be listed (see ``visible_entries``)."""
    return [folder / name for name in visible_entries(folder, "dir")]


def visible_entries(
    folder: str | os.PathLike[str], kind: Literal["file", "dir"], suffixes: Set[str] | None = None
) -> list[str]:
    """Names of the visible (not dot-) files or sub-folders directly in ``folder``, sorted, optionally only
    those whose lower-case suffix is in ``suffixes``; [] if ``folder`` itself cannot be listed. An entry that
    cannot be stat'ed or whose name is not UTF-8 (ids and records are UTF-8 text) is left out and named in
    one ``SkippedEntriesWarning``, instead of hiding the whole folder or failing later.
    """
    names: list[str] = []
    skipped: list[tuple[str, str]] = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                if suffixes is not None and os.path.splitext(entry.name)[1].lower() not in suffixes:
                    continue
                if not is_utf8(entry.name):
                    skipped.append((entry.path, "the name is not valid UTF-8"))
                    continue
                try:
                    if entry.is_symlink():
                        entry.stat()  # a dangling link raises here, where is_file() would just say False
                    if entry.is_file() if kind == "file" else entry.is_dir():
                        names.append(entry.name)
                except OSError as exc:
                    skipped.append((entry.path, f"cannot be read ({exc.strerror or exc})"))
    except OSError:
        return []
    if skipped:
        warnings.warn(SkippedEntriesWarning(folder, sorted(skipped)), stacklevel=2)
    return sorted(names)


def read_index_lines(path: Path, fix: str) -> Iterator[tuple[int, list[str]]]:
    """The non-blank lines of a whitespace-separated index file as (1-based line number, fields); split
    lazily, which keeps the garbage collector's work small on 120k-line indexes."""
    if not path.is_file():
        raise DatasetError(f"index file {path.name} not found", path=path, fix=fix)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte order mark is no part of the first line
    except UnicodeDecodeError as exc:
        raise DatasetError(f"index file is not UTF-8 text ({exc})", path=path, fix=fix) from exc
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if fields:
            yield number, fields


def malformed_line(path: Path, number: int, problem: str, fix: str) -> DatasetError:
    return DatasetError(f"line {number} of {path.name} is malformed: {problem}", path=path, fix=fix)


def parse_int(text: str, path: Path, number: int, what: str, fix: str) -> int:
    """``text`` as an integer, or a ``DatasetError`` naming the line."""
    try:
        return int(text)
    except ValueError:
        raise malformed_line(path, number, f"{what} {text!r} is not an integer", fix) from None


def require_files(paths: Sequence[Path], what: str, where: Path, fix: str) -> None:
    """Raise if any of ``paths`` is not on disk, naming the first few and the count."""
    missing = missing_files(paths)
    if missing:
        raise DatasetError(f"{len(missing)} of {len(paths)} {what} are missing on disk: "
                           f"{describe_paths(missing)}", path=where, fix=fix)


def missing_files(paths: Iterable[Path]) -> list[Path]:
    """The paths that are not files, found by listing each parent folder once (fast for 100k+ images)."""
    by_folder: dict[str, list[tuple[str, Path]]] = {}
    for path in paths:
        folder, name = os.path.split(os.fspath(path))
        by_folder.setdefault(folder, []).append((name, path))
    missing: list[Path] = []
    for folder, wanted in by_folder.items():
        try:
            with os.scandir(folder or ".") as entries:
                present = {entry.name for entry in entries if _is_file(entry)}
        except OSError:
            present = set()
        missing += [path for name, path in wanted if name not in present]
    return sorted(missing)


def _is_file(entry: os.DirEntry[str]) -> bool:
    """Whether ``entry`` is a file; one that cannot be stat'ed (a looping link) is not, and costs only itself,
    not its whole folder."""
    try:
        return entry.is_file()
    except OSError:
        return False


def describe_paths(paths: Sequence[Path]) -> str:
    """A short list of paths for an error message."""
    shown = ", ".join(printable_path(p) for p in paths[:EXAMPLES_SHOWN])
    return shown if len(paths) <= EXAMPLES_SHOWN else f"{shown}, ... ({len(paths) - EXAMPLES_SHOWN} more)"
