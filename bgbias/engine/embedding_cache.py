"""Per-image states kept on disk, keyed by everything that determines them, so re-scoring costs no forward
pass.

Image and mask files enter the key by a stat fingerprint (path, size, modification time), as build tools do:
hashing SOP's pixels on each run would cost more than it saves. The key is stored in the file and compared on
load, so a digest collision or a copied file never hands back the wrong embeddings.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from bgbias.data.array_files import load_npz
from bgbias.data.memory import InMemoryImage
from bgbias.fileio import write_bytes_atomic
from bgbias.schema import format_header

CACHE_FORMAT = "bgbias-embedding-cache"
"""The format every key states (:func:`~bgbias.schema.format_header`): a file made for a key of another format
is never used. It gets a new identifier when what is embedded for the same key changes (transform, embedding
code) or the file's layout does."""

_ARRAY = "state."


def files_fingerprint(paths: Iterable[str | os.PathLike[str] | InMemoryImage]) -> str | None:
    """sha256 over each file's path, size and mtime (ns); None where any is a sample in memory."""
    digest = hashlib.sha256()
    for path in paths:
        if isinstance(path, InMemoryImage):
            return None
        stat = os.stat(path)
        digest.update(f"{os.fspath(path)}\t{stat.st_size}\t{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def key_digest(key: dict[str, Any]) -> str:
    """A stable hex digest of a key (canonical JSON: sorted keys, no spaces)."""
    canonical = json.dumps({**format_header(CACHE_FORMAT), **key}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class EmbeddingCache:
    """``folder/<digest>.npz`` files holding a set's per-image state and the key it was made for; labels
    always come from the dataset, and a loader checks the arrays against the set and the model."""

    def __init__(self, folder: str | os.PathLike[str]):
        self.folder = Path(folder)

    def path(self, key: dict[str, Any]) -> Path:
        return self.folder / f"{key_digest(key)[:24]}.npz"

    def load(self, key: dict[str, Any]) -> dict[str, np.ndarray] | None:
        """The named arrays stored for ``key``, or None (then they are simply made again)."""
        path = self.path(key)
        if not path.is_file():
            return None
        try:
            stored = load_npz(path)
            if json.loads(str(stored["key"])) != _normalised(key):
                return None
            return {name[len(_ARRAY):]: array for name, array in stored.items() if name.startswith(_ARRAY)}
        except (OSError, ValueError, KeyError, json.JSONDecodeError, zipfile.BadZipFile):
            return None

    def save(self, key: dict[str, Any], state: dict[str, np.ndarray]) -> Path:
        buffer = io.BytesIO()
        key_text = json.dumps(_normalised(key), sort_keys=True)
        np.savez(buffer, key=np.array(key_text), **{_ARRAY + name: array for name, array in state.items()})
        path = self.path(key)
        write_bytes_atomic(path, buffer.getvalue())
        return path


def _normalised(key: dict[str, Any]) -> Any:
    """The key as it reads back from JSON (tuples become lists), for an exact comparison."""
    return json.loads(json.dumps({**format_header(CACHE_FORMAT), **key}, sort_keys=True))
