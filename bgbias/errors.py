"""Errors a user can act on: each says what went wrong, which file it concerns, and how to fix it."""

from __future__ import annotations

import os


class BgbiasError(Exception):
    """A problem with the user's input or environment, reported without a traceback by the CLI."""

    def __init__(self, problem: str, *, path: str | os.PathLike[str] | None = None, fix: str | None = None):
        self.problem = problem
        self.path = None if path is None else os.fspath(path)
        self.fix = fix
        super().__init__(self.render())

    def render(self) -> str:
        lines = [self.problem]
        if self.path is not None:
            lines.append(f"  file: {self.path}")
        if self.fix is not None:
            lines.append(f"  fix:  {self.fix}")
        return "\n".join(lines)


class AssetError(BgbiasError):
    """A weight file, package or data asset is missing, damaged or cannot be fetched."""


class DatasetError(BgbiasError):
    """A dataset folder does not have the expected layout or index files."""


class ImageError(BgbiasError):
    """An image or mask file cannot be read (corrupt, truncated, unsupported, too large)."""


class OptionError(BgbiasError):
    """A command-line option or configuration value is invalid."""
