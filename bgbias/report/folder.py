"""A report folder is written all at once or not at all: into an empty folder beside it that replaces the old
one only once every file is written (:func:`bgbias.fileio.atomic_dir`), so a report never mixes files of two
measurements. Replacing removes what else the folder holds, so a folder with anything a report does not
write is refused before any work, naming what is in the way.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from bgbias.engine.external_model import folder_owner
from bgbias.errors import OptionError, OutputError, output_error
from bgbias.fileio import atomic_dir

RUNS_REPORT_FILES = ("table.md", "table.csv", "table.json", "runs.png", "profile.csv", "foreground-*.png",
                     "seeds.md", "seeds.json", "study.md", "study.html", "per-class-drop.png",
                     "over-seeds.png")
"""What ``bgbias report`` (with or without ``--study``) and the study's page write."""
EVAL_REPORT_FILES = ("report.json", "report.csv", "report.md", "per_query.csv", "per_class.csv",
                     "profile.csv", "*.png")
"""What an evaluation writes into its report folder."""
DIAL_FILES = ("dial.md", "dial.json", "dial.png")
_LITTER = (".*.tmp", ".DS_Store", "Thumbs.db", "desktop.ini")
"""What a killed atomic write leaves behind (:func:`bgbias.fileio.atomic_path`), and what file browsers
drop into a folder they show."""


def write_report_folder(
    out_dir: str | os.PathLike[str], write: Callable[[Path], Mapping[str, Path]], owns: Sequence[str]
) -> dict[str, Path]:
    """Call ``write(stage)`` with an empty folder beside ``out_dir``, then put that folder in its place;
    return the files ``write`` returns as they lie in ``out_dir``. An ``out_dir`` holding an entry none of the
    patterns ``owns`` matches is refused before ``write`` runs."""
    out = Path(out_dir)
    where = Path(os.path.abspath(out))
    _check_replaceable(where, owns)
    written: dict[str, Path] | None = None
    try:
        with atomic_dir(where) as stage:
            written = dict(write(stage))
    except OSError as error:
        if written is None:  # raised by ``write``, which reports its own errors
            raise
        raise output_error(error, where) from error  # putting the new folder in place failed
    return {name: out / path.relative_to(stage) if path.is_relative_to(stage) else path
            for name, path in written.items()}


def refuse_model_folder(out: Path, folder: str, writes: str, fix: str, parameter: str | None = None) -> None:
    """Refuse ``out`` (``folder``, as the error calls it) where it is, or lies inside, a run folder or a
    model's home: ``writes`` (what would go there) would read as that model's."""
    owner = folder_owner(out)
    if owner is not None:
        raise OptionError(f"{folder} is or lies inside {owner.describe()}: {writes} would read as that "
                          "model's", path=out, fix=fix, parameter=parameter)


def _check_replaceable(out: Path, owns: Sequence[str]) -> None:
    if not out.name:
        raise OptionError("a report cannot replace the root of the file system", path=out,
                          fix="write the report to a folder of its own")
    if out.exists() and not out.is_dir():
        raise OutputError("a file stands where the report's folder is needed", path=out,
                          fix="remove or rename that file, or write the report to another folder")
    if not out.is_dir():
        return
    foreign = sorted(entry.name for entry in os.scandir(out)
                     if entry.is_dir(follow_symlinks=False) or not any(
                         fnmatch.fnmatchcase(entry.name, pattern) for pattern in (*owns, *_LITTER)))
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise OptionError(
            f"the folder holds what a report does not write ({shown}); a report replaces its folder as a "
            "whole, which would delete them", path=out,
            fix="move those entries elsewhere, or write the report to a folder of its own")
