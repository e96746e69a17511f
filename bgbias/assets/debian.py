"""Read the files of a Debian package (.deb) in pure Python, so that no dpkg and no root are needed: an ``ar``
archive whose ``data.tar.*`` (xz, gzip, bzip2 or zstd) is streamed, never held in memory.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from bgbias.errors import AssetError

_AR_MAGIC = b"!<arch>\n"
_AR_HEADER = 60
_UNPACK = "unpack it with `dpkg-deb -x FILE DIR` and fetch from it: `bgbias assets fetch --from DIR`"
_UNPACK_FIX = f"download it again, or {_UNPACK}"


@dataclass(frozen=True)
class ArMember:
    name: str
    offset: int  # where the member's bytes start in the archive
    size: int


def ar_members(path: Path) -> list[ArMember]:
    """The members of an ``ar`` archive (common format, as dpkg writes it)."""
    members = []
    with open(path, "rb") as handle:
        if handle.read(len(_AR_MAGIC)) != _AR_MAGIC:
            raise AssetError("not a Debian package (.deb): no ar archive header", path=path, fix=_UNPACK_FIX)
        while header := handle.read(_AR_HEADER):
            if len(header) < _AR_HEADER or header[58:60] != b"`\n":
                raise AssetError("truncated or damaged .deb (bad ar header)", path=path, fix=_UNPACK_FIX)
            name = header[:16].decode("ascii", "replace").rstrip().rstrip("/")
            size = int(header[48:58].decode("ascii").strip() or 0)
            offset = handle.tell()
            members.append(ArMember(name, offset, size))
            handle.seek(size + size % 2, os.SEEK_CUR)  # members are padded to an even length
    return members


class _Slice(io.RawIOBase):
    """A read-only view of ``size`` bytes of a file from ``offset``: one ar member as a stream."""

    def __init__(self, handle: BinaryIO, offset: int, size: int):
        self._handle = handle
        self._left = size
        handle.seek(offset)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        if self._left <= 0:
            return 0
        view = memoryview(buffer)[: min(len(buffer), self._left)]
        count = self._handle.readinto(view) or 0
        self._left -= count
        return count


def _zstd_reader(raw: BinaryIO, path: Path) -> BinaryIO:
    """zstd comes with Python 3.14 (``compression.zstd``) or the ``zstandard`` package; else say so."""
    try:
        from compression import zstd  # type: ignore[import-not-found]

        return zstd.ZstdFile(raw)
    except ImportError:
        pass
    try:
        import zstandard  # type: ignore[import-not-found]
    except ImportError:
        raise AssetError("this .deb compresses its files with zstd, which this Python cannot read", path=path,
                         fix=f"`pip install zstandard`, or {_UNPACK}") from None
    return zstandard.ZstdDecompressor().stream_reader(raw)


_OPENERS = {".xz": lzma.open, ".gz": gzip.open, ".bz2": bz2.open}


def _decompressed(name: str, raw: BinaryIO, path: Path) -> BinaryIO:
    if (suffix := Path(name).suffix) in _OPENERS:
        return _OPENERS[suffix](raw)  # type: ignore[return-value]
    if name.endswith(".zst"):
        return _zstd_reader(raw, path)
    if name.endswith(".tar"):
        return raw
    raise AssetError(f"unknown compression of {name} in the .deb", path=path, fix=_UNPACK_FIX)


def normalise_member_path(name: str) -> str | None:
    """``./usr/share/x`` -> ``usr/share/x``; None for a path leaving the archive root (``..``, absolute)."""
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if not parts or ".." in parts or name.startswith("/"):
        return None
    return "/".join(parts)


def deb_files(path: str | os.PathLike[str]) -> Iterator[tuple[str, BinaryIO]]:
    """Stream the regular files of a .deb's ``data.tar.*`` as ``(relative path, readable stream)``, each valid
    only until the iterator moves on; links and folders are skipped."""
    path = Path(path)
    data = [m for m in ar_members(path) if m.name.startswith("data.tar")]
    if not data:
        raise AssetError("the .deb has no data.tar member", path=path, fix=_UNPACK_FIX)
    with open(path, "rb") as handle:
        raw = io.BufferedReader(_Slice(handle, data[0].offset, data[0].size), buffer_size=1 << 20)
        stream = _decompressed(data[0].name, raw, path)
        try:
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                for info in tar:
                    name = normalise_member_path(info.name)
                    if name is None or not info.isfile():
                        continue
                    member = tar.extractfile(info)
                    if member is not None:
                        yield name, member
        except (tarfile.TarError, lzma.LZMAError, EOFError, zlib.error, OSError) as err:
            problem = f"cannot read the .deb's {data[0].name}: {err}"
            raise AssetError(problem, path=path, fix=_UNPACK_FIX) from err
        finally:
            stream.close()
