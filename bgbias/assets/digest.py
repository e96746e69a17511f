"""SHA-256 digests of files, streams and folder trees: the proof that an asset is the one we pinned."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from bgbias.fileio import reporting_write_errors

_CHUNK = 1 << 20
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def is_sha256(value: object) -> bool:
    """Whether ``value`` is a hex SHA-256 as this module writes it (64 lower-case hex digits)."""
    return isinstance(value, str) and _SHA256_HEX.fullmatch(value) is not None


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file, read in chunks so a 176 MB model never sits in memory."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def copy_with_sha256(source: BinaryIO, target: str | os.PathLike[str]) -> tuple[str, int]:
    """Copy a stream into a new file and return its (hex SHA-256, size): one pass for both jobs."""
    digest = hashlib.sha256()
    size = 0
    with reporting_write_errors(target), open(target, "wb") as out:
        for chunk in iter(lambda: source.read(_CHUNK), b""):
            digest.update(chunk)
            out.write(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def tree_digest(entries: Iterable[tuple[str, str]]) -> str:
    """Digest of a folder from its ``(relative POSIX path, file SHA-256)`` pairs: the SHA-256 of the
    ``sha256sum`` listing ``"<sha256>  <path>\\n"`` sorted by path, so it can be reproduced by hand."""
    listing = "".join(f"{sha}  {rel}\n" for rel, sha in sorted(entries))
    return hashlib.sha256(listing.encode("utf-8")).hexdigest()


def select_tree_files(root: Path, suffixes: tuple[str, ...]) -> list[tuple[str, Path]]:
    """Files under ``root`` whose name ends in one of ``suffixes``, as sorted ``(relative path, path)``."""
    found = []
    for folder, _dirs, files in os.walk(root):
        for name in files:
            if name.endswith(suffixes):
                path = Path(folder) / name
                found.append((path.relative_to(root).as_posix(), path))
    return sorted(found)
