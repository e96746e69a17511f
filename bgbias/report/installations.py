"""Whether the results a table or page puts side by side were made under one installation.

A run records the installation it trained under (``run.json``) and every evaluation the one it scored under
(``report.json``; :mod:`bgbias.installation`). Figures made under different package versions or processors
can differ in their last digits with everything else equal, so a comparison says when they do, and how."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bgbias.engine.run_dir import RunDir, read_record
from bgbias.installation import InstallationRecord, installation_differences, installation_digest
from bgbias.measurement.record import EvaluationReport
from bgbias.report.document import Block, Bullets, Heading, Paragraph

INSTALLATIONS_NOTE = (
    "These results may not all have been made under the same installation, so some of their differences may "
    "come from the installation rather than the models (same seed, other package versions or another "
    "processor: other digits). scripts/setup.sh installs the locked versions; what differs:")


def result_installations(reports: Sequence[EvaluationReport]) -> dict[str, dict[str, Any] | None]:
    """Each result's installation by label: a run folder's training (its ``run.json``) and each of its
    evaluations (``report.json``), one entry per folder where they all agree, else ``<folder> (training)``
    and ``<folder> (evaluation of <set>)``; ``None`` where a run's record is missing or damaged."""
    by_folder: dict[str, dict[str, dict[str, Any] | None]] = {}
    for report in reports:
        folder = report.run or "?"
        entries = by_folder.setdefault(folder, {})
        if "training" not in entries and (Path(folder) / "config.json").is_file():
            record = read_record(RunDir(Path(folder)))
            entries["training"] = _as_dict(record.installation if record else None)
        _method, _bgaugment, measured, split = report.key
        entries[f"evaluation of {measured}-{split}"] = _as_dict(report.installation)
    out: dict[str, dict[str, Any] | None] = {}
    for folder, entries in sorted(by_folder.items()):
        name = Path(folder).name or folder
        digests = {installation_digest(record) if record else None for record in entries.values()}
        if len(digests) == 1:
            out[name] = next(iter(entries.values()))
        else:
            out.update({f"{name} ({what})": record for what, record in entries.items()})
    return out


def _as_dict(record: InstallationRecord | None) -> dict[str, Any] | None:
    """An installation record as :mod:`bgbias.installation` compares them (as :func:`installation` gives
    one)."""
    return None if record is None else record.model_dump()


def installation_lines(reports: Sequence[EvaluationReport]) -> list[str]:
    """How the installations of ``reports``' results differ (:func:`installation_differences`); empty when
    they were all made under one, or none says."""
    records = result_installations(reports)
    if not any(records.values()):
        return []
    return installation_differences(records)


class MixedInstallationsWarning(UserWarning):
    """A table or page compares results made under different installations (the CLI prints it as a
    ``warning:`` line; the page says it too)."""


def installation_blocks(reports: Sequence[EvaluationReport]) -> list[Block]:
    """The *Installations* section of a table or page of ``reports``; none when one installation made them
    all."""
    lines = installation_lines(reports)
    return [Heading("Installations"), Paragraph(INSTALLATIONS_NOTE), Bullets(tuple(lines))] if lines else []


def warn_if_mixed(reports: Sequence[EvaluationReport], where: str) -> None:
    """A :class:`MixedInstallationsWarning` naming ``where`` (the page) when ``reports``' results were made
    under different installations, so a person reading the terminal, not the page, hears it too."""
    lines = installation_lines(reports)
    if lines:
        warnings.warn(MixedInstallationsWarning(f"{where}: {INSTALLATIONS_NOTE} " + "; ".join(lines)),
                      stacklevel=2)
