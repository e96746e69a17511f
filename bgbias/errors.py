"""Errors a user can act on: each says what went wrong, which file it concerns, and how to fix it."""

from __future__ import annotations

import errno
import os


class BgbiasError(Exception):
    """A problem with the user's input or environment, reported without a traceback by the CLI."""

    def __init__(self, problem: str, *, path: str | os.PathLike[str] | None = None, fix: str | None = None):
        self.problem = problem
        self.path = None if path is None else os.fspath(path)
        self.fix = fix
        super().__init__(self.render())

    def __reduce__(self):
        # Pickled whole (problem, file, fix), so an error raised in a worker process keeps its parts.
        return _rebuild, (type(self), self.problem, self.path, self.fix)

    def render(self) -> str:
        lines = [self.problem]
        if self.path is not None:
            lines.append(f"  file: {self.path}")
        if self.fix is not None:
            lines.append(f"  fix:  {self.fix}")
        return "\n".join(lines)


def _rebuild(kind: type[BgbiasError], problem: str, path: str | None, fix: str | None) -> BgbiasError:
    return kind(problem, path=path, fix=fix)


class AssetError(BgbiasError):
    """A weight file, package or data asset is missing, damaged or cannot be fetched."""


class DatasetError(BgbiasError):
    """A dataset folder does not have the expected layout or index files."""


class ImageError(BgbiasError):
    """An image or mask file cannot be read (corrupt, truncated, unsupported, too large)."""


class OptionError(BgbiasError):
    """A command-line option or configuration value is invalid."""


class OutputError(BgbiasError):
    """A file or folder cannot be written: a read-only or full disk, no permission, a file where a folder is
    needed."""


def output_error(error: OSError, path: str | os.PathLike[str]) -> OutputError:
    """The ``OSError`` met while writing ``path`` as an error a user can act on (what, where, the fix)."""
    where = error.filename if error.filename is not None else path
    if isinstance(error, NotADirectoryError | FileExistsError):
        return OutputError("a file stands where a folder is needed", path=where,
                           fix="remove or rename that file, or choose another output folder")
    if error.errno == errno.ENOSPC:
        return OutputError("no space left on the device", path=where,
                           fix="free disk space, or write elsewhere")
    reason = "it is on a read-only file system" if error.errno == errno.EROFS else (
        "permission denied" if isinstance(error, PermissionError) else error.strerror or str(error))
    return OutputError(f"cannot write here: {reason}", path=where,
                       fix="choose a folder you can write to, or make this one writable")
