"""Errors a user can act on: each says what went wrong, which file it concerns, and how to fix it."""

from __future__ import annotations

import errno
import functools
import os
import re
from collections.abc import Mapping, Sequence

EXIT_PARTIAL = 3
"""Exit status of a command that finished but could not process some of its inputs: they are listed on the
terminal and, with the reason and the fix for each, in the output's manifest. (A ``BgbiasError`` exits 2.)"""


def printable_path(path: str | os.PathLike[str]) -> str:
    """``path`` as it can be printed and written as UTF-8 text: itself, or the repr of its bytes (e.g.
    ``b'caf\\xe9.jpg'``) when its name is not valid UTF-8 and Python holds it with lone surrogates, which
    no UTF-8 writer accepts."""
    text = os.fspath(path)
    return text if is_utf8(text) else repr(os.fsencode(text))


def is_utf8(text: str) -> bool:
    """False for a name Python decoded from bytes that are not UTF-8 (it then holds lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


PARAMETER = "{parameter}"
"""Where an error's text names the argument it concerns (its ``parameter``), filled in by whoever reports it:
``max_memory=`` for Python, ``--max-memory`` on the command line (:func:`given` adds a value). A command
quoted as a fix (``bgbias masks --dataset cub``) is written as it is."""

_NAMED = re.compile(r"\{parameter(?:=((?:[^}]|\}\})*))?\}")
""":data:`PARAMETER`, or :func:`given`'s form of it with its value (a ``}`` in it doubled)."""


def given(value: object) -> str:
    """Where an error's text names its argument with ``value`` (as shown: ``repr`` a string),
    ``max_memory=5`` for Python and ``--max-memory 5`` on the command line; a switch turned on (``True``):
    ``--trust-model``."""
    return "{parameter=" + str(value).replace("}", "}}") + "}"


class BgbiasError(Exception):
    """A problem with the user's input or environment, reported without a traceback by the CLI.

    ``parameter`` is the argument the problem concerns (its Python name), where one does: ``problem`` and
    ``fix`` name it with :data:`PARAMETER`, and read in Python's words; :meth:`render` words it as asked."""

    def __init__(self, problem: str, *, path: str | os.PathLike[str] | None = None, fix: str | None = None,
                 parameter: str | None = None):
        self.texts = (problem, fix)
        """``problem`` and ``fix`` as given, with :data:`PARAMETER` where the argument goes."""
        self.parameter = parameter
        self.path = None if path is None else os.fspath(path)
        self.problem = self._worded(problem)
        self.fix = None if fix is None else self._worded(fix)
        super().__init__(self.render())

    def __reduce__(self):
        # Pickled whole (texts, file, parameter), so an error raised in a worker process keeps its parts.
        rebuild = functools.partial(type(self), path=self.path, fix=self.texts[1], parameter=self.parameter)
        return rebuild, (self.texts[0],)

    def render(self, options: Mapping[str, str] | None = None) -> str:
        """The error's lines: in Python's words, or with ``options`` (the command line's, each parameter's
        option where it is not ``--`` and the parameter's name with dashes) in the command line's."""
        problem, fix = (self.problem, self.fix) if options is None else (
            self._worded(text, options) if text is not None else None for text in self.texts)
        lines = [problem]
        if self.path is not None:
            lines.append(f"  file: {printable_path(self.path)}")
        if fix is not None:
            lines.append(f"  fix:  {fix}")
        return "\n".join(lines)

    def _worded(self, text: str, options: Mapping[str, str] | None = None) -> str:
        if self.parameter is None:
            return text
        dashed = "--" + self.parameter.replace("_", "-")
        option = None if options is None else options.get(self.parameter, dashed)

        def named(match: re.Match[str]) -> str:
            value = None if match[1] is None else match[1].replace("}}", "}")
            if option is None:
                return f"{self.parameter}={value or ''}"
            return option if value in (None, "True") else f"{option} {value}"

        return _NAMED.sub(named, text)


class AssetError(BgbiasError):
    """A weight file, package or data asset is missing, damaged or cannot be fetched."""


class DatasetError(BgbiasError):
    """A dataset folder does not have the expected layout or index files."""


class ImageError(BgbiasError):
    """An image or mask file cannot be read (corrupt, truncated, unsupported, too large)."""


class OptionError(BgbiasError):
    """A command-line option or configuration value is invalid."""


class ModelError(BgbiasError):
    """A model given to be scored cannot be loaded or run as stated: an unsafe or unknown file, a factory that
    cannot be imported or returns no module, an output that is not one embedding per image."""


class RecordError(BgbiasError):
    """A file bgbias wrote and reads back (a report, a run's record, an explanation's summary) is missing,
    damaged, or holds a field of another type than bgbias writes (:mod:`bgbias.schema`)."""


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
    if error.errno == errno.EDQUOT:
        return OutputError("the disk quota is used up", path=where,
                           fix="free space within your quota, or write elsewhere")
    reason = "it is on a read-only file system" if error.errno == errno.EROFS else (
        "permission denied" if isinstance(error, PermissionError) else error.strerror or str(error))
    return OutputError(f"cannot write here: {reason}", path=where,
                       fix="choose a folder you can write to, or make this one writable")


class BusyError(BgbiasError):
    """Another process is writing the same output right now."""


class SkippedEntriesWarning(UserWarning):
    """A folder listing left out entries it could not use (a name that is not valid UTF-8, an entry that
    cannot be stat'ed such as a broken or looping link); one warning per folder, naming each entry and why,
    so a class folder or a pool never loses images without saying so."""

    SHOWN = 10
    """Entries named in the message before it only gives the count."""

    def __init__(self, folder: str | os.PathLike[str], skipped: Sequence[tuple[str, str]]):
        self.folder = os.fspath(folder)
        self.skipped = list(skipped)
        """(path, reason) of each entry left out."""
        super().__init__(self.folder, self.skipped)  # the arguments themselves, so the warning pickles

    def __str__(self) -> str:
        count = len(self.skipped)
        lines = [f"{count} of the entries of this folder {'is' if count == 1 else 'are'} not used:"]
        lines += [f"    {printable_path(path)}: {reason}" for path, reason in self.skipped[: self.SHOWN]]
        if len(self.skipped) > self.SHOWN:
            lines.append(f"    ... ({len(self.skipped) - self.SHOWN} more)")
        lines.append(f"  file: {printable_path(self.folder)}")
        lines.append(
            "  fix:  rename files whose name is not valid UTF-8, remove broken or looping links, and make "
            "unreadable entries readable"
        )
        return "\n".join(lines)
