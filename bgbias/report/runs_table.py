"""Several runs in the layout of the paper's Table 1 (``bgbias report RUN...``; docs/evaluation.md): one row
per method and its ``+ BGAugment`` row, clean and corrupted MAP@R per dataset, a foreground-score column per
dataset and attribution where scores are given, and a second table of every profiled run's sets. Methods,
datasets and labels keep the order in which they are first named; a run not given leaves its cells empty.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bgbias.attribution.outputs import ExplainSummary, explained_sets
from bgbias.engine.model_folders import open_model_folder
from bgbias.errors import OptionError
from bgbias.fileio import write_json_atomic, write_text_atomic
from bgbias.measurement.record import EvaluationReport, run_label
from bgbias.measurement.summary import PROFILE_SETS
from bgbias.methods.attribution import DEFAULT_ATTRIBUTION
from bgbias.report.compare import compare_runs
from bgbias.report.document import Block, Bullets, Heading, Paragraph, Table, to_markdown
from bgbias.report.evaluation import csv_text, index_reports, load_evaluation_report, percent, percent_spread
from bgbias.report.folder import RUNS_REPORT_FILES, write_report_folder
from bgbias.report.installations import installation_blocks, warn_if_mixed
from bgbias.report.plots import plot_runs
from bgbias.schema import format_header

TABLE_FORMAT = "bgbias-runs-table"

PROFILE_NOTE = (
    "Each run's sets: clean; repasted (the paste control: the object composited back onto its own "
    "background, the hole under it inpainted, so only the paste differs from clean); random backgrounds both "
    "sides (the paper's) and query-side (against the clean gallery); the worst of K random backgrounds per "
    "query (query-side); only-fg (object on black); only-bg (object removed, the hole tiled from the image's "
    "own background, black, or inpainted around a dilated mask); mixed-same / mixed-rand (the object on "
    "another image's tiled background, same / other class); the BG-gap (mixed-same − mixed-rand, points); "
    "chance (a random ranking). Mean ± std over a set's repeats; – where a run's record has no such set "
    "(measured before it existed)."
)
NOT_MEASURED = "–"
"""The cell of a profile set that a run's record lacks: the run was profiled before the set existed."""

ForegroundKey = tuple[str, bool, str, str]
"""Which run and attribution a foreground-score summary belongs to: (method, bgaugment, dataset, label)."""

Foreground = Mapping[ForegroundKey, "ExplainSummary"]
"""Foreground-score summaries (``summary.json`` of ``bgbias explain``) by run and attribution."""


def table_one(
    reports: Sequence[EvaluationReport], foreground: Foreground | None = None
) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the Table-1 layout, a foreground-score column per dataset and label; two reports
    of one (method, bgaugment, dataset, split) are an error naming both runs."""
    by_key = index_reports(reports)
    foreground = foreground or {}
    methods = list(dict.fromkeys([key[0] for key in by_key] + [key[0] for key in foreground]))
    groups = list(dict.fromkeys(key[2:] for key in by_key))
    datasets = [dataset for dataset, _ in groups] + [key[2] for key in foreground]
    fg_datasets = list(dict.fromkeys(datasets)) if foreground else []
    labels = list(dict.fromkeys(key[3] for key in foreground))
    fg_columns = []
    for dataset in fg_datasets:  # a dataset without any score keeps one (empty) column, as before labels
        present = [label for label in labels if any(key[2:] == (dataset, label) for key in foreground)]
        fg_columns += [(dataset, label) for label in present or [DEFAULT_ATTRIBUTION]]
    headers = ["method"]
    for dataset, split in groups:
        name = dataset if split == "test" else f"{dataset} ({split})"
        headers += [f"{name} clean", f"{name} corrupted"]
    headers += [f"{dataset} fg score" + ("" if label == DEFAULT_ATTRIBUTION else f" ({label})")
                for dataset, label in fg_columns]
    # A model bgbias did not train (its report's bgaugment is None) has no "+ BGAugment" counterpart.
    external = {report.method for report in reports if report.bgaugment is None}
    rows = []
    for method in methods:
        for bgaugment in (False,) if method in external else (False, True):
            row = [run_label(method, bgaugment)]
            for dataset, split in groups:
                row += _map_cells(by_key.get((method, bgaugment, dataset, split)))
            row += [_foreground_cell(foreground.get((method, bgaugment, dataset, label)))
                    for dataset, label in fg_columns]
            rows.append(row)
    return headers, rows


def profile_table(reports: Sequence[EvaluationReport]) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the profile table: per report with a profile, the run, what it was measured on,
    and MAP@R (%, mean ± std over its sets) of each profile set; no rows where no report has one."""
    profiled = [report for report in reports if report.profile]
    order = list(PROFILE_SETS)  # a set an older record lacks keeps its place whichever report comes first
    names = sorted(dict.fromkeys(row.set for report in profiled for row in report.profile.sets),
                   key=lambda name: order.index(name) if name in order else len(order))
    rows = []
    for report in profiled:
        _method, _bgaugment, dataset, split = report.key
        sets = {row.set: row for row in report.profile.sets}
        rows.append([report.label, dataset if split == "test" else f"{dataset} ({split})",
                     *(percent_spread(sets[name].mean.map_at_r, sets[name].std.map_at_r)
                       if name in sets else NOT_MEASURED for name in names)])
    return ["method", "measured on", *names], rows


def write_runs_report(
    reports: Sequence[EvaluationReport],
    foreground: Foreground | None,
    out_dir: str | os.PathLike[str],
) -> dict[str, Path]:
    """Write ``table.md``, ``table.csv``, ``table.json`` (the table plus every run's raw numbers),
    ``runs.png`` and, where a run has a profile, ``profile.csv`` into the new report folder ``out_dir``, each
    atomically; return their paths keyed by file name with ``_`` for ``.``."""
    headers, rows = table_one(reports, foreground)
    profile_headers, profile_rows = profile_table(reports)
    out = Path(out_dir)
    paths = {"table_md": out / "table.md", "table_csv": out / "table.csv", "table_json": out / "table.json",
             "runs_png": out / "runs.png"}
    fg_note = "; fg score: foreground attribution score, mean ± std over images" if foreground else ""
    blocks: list[Block] = [
        Heading("MAP@R (%) on clean and corrupted sets", 1),
        Paragraph(f"clean: one value; corrupted: mean ± std over the background draws{fg_note}"),
        Table(tuple(headers), tuple(map(tuple, rows))),
        *installation_blocks(reports),
        Heading("Runs"),
        Bullets(tuple(f"{r.label} on {r.dataset} ({r.split} split): {r.run or '?'}" for r in reports)),
    ]
    if profile_rows:
        blocks += [Heading("Background-reliance profile (MAP@R, %)"), Paragraph(PROFILE_NOTE),
                   Table(tuple(profile_headers), tuple(map(tuple, profile_rows)))]
    write_text_atomic(paths["table_md"], to_markdown(blocks, out))
    if profile_rows:
        paths["profile_csv"] = out / "profile.csv"
        write_text_atomic(paths["profile_csv"], csv_text(profile_headers, profile_rows))
    write_text_atomic(paths["table_csv"], csv_text(headers, rows))
    write_json_atomic(paths["table_json"], {
        **format_header(TABLE_FORMAT),
        "headers": headers,
        "rows": rows,
        "runs": [_run_numbers(report) for report in reports],
        # Each summary names its attribution and options, so entries of several attributions stay apart;
        # the dataset's folder on the machine that explained is left out, so the report is the same bytes
        # wherever the study's folder lies, and so is the summary's format (the table states its own).
        "foreground": [{"method": m, "bgaugment": b, "dataset": d,
                        **summary.model_dump(exclude_unset=True,
                                             exclude={"dataset_root", "format", "version"})}
                       for (m, b, d, _label), summary in (foreground or {}).items()],
    })
    plot_runs(reports, paths["runs_png"])
    return paths


@dataclass(frozen=True)
class RunsReport:
    """What ``bgbias report`` read and wrote: the evaluation reports, foreground scores, and the files."""

    reports: list[EvaluationReport]
    foreground: dict[ForegroundKey, ExplainSummary]
    files: dict[str, Path]
    galleries: list[Path]


def report_runs(
    run_dirs: Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    split: str = "test",
    label: str = DEFAULT_ATTRIBUTION,
) -> RunsReport:
    """``bgbias report``: the table of the runs' evaluations on ``split`` and the galleries of their
    attribution maps (``label``) side by side in ``out_dir``, which they replace all at once or not at all."""
    reports, foreground = collect_runs(run_dirs, split)

    def write(stage: Path) -> dict[str, Path]:
        files = write_runs_report(reports, foreground, stage)
        galleries = compare_runs(run_dirs, split, stage, label)
        return {**files, **{f"gallery_{number}": path for number, path in enumerate(galleries)}}

    files = write_report_folder(out_dir, write, RUNS_REPORT_FILES)
    warn_if_mixed(reports, str(files["table_md"]))
    galleries = [path for name, path in files.items() if name.startswith("gallery_")]
    return RunsReport(reports, foreground, files, galleries)


def collect_runs(
    run_dirs: Sequence[str | os.PathLike[str]], split: str = "test"
) -> tuple[list[EvaluationReport], dict[ForegroundKey, ExplainSummary]]:
    """The evaluation reports on ``split`` and foreground-score summaries of run folders and external models'
    folders, keyed (method, bgaugment, dataset key, label); a folder without any evaluation report is an error
    that says how to make one."""
    reports: list[EvaluationReport] = []
    foreground: dict[ForegroundKey, ExplainSummary] = {}
    for path in run_dirs:
        folder = open_model_folder(path)
        found = sorted(folder.root.glob(f"eval/*-{split}/report.json"))
        if not found:
            raise OptionError(f"the folder has no evaluation report for the {split} split", path=folder.root,
                              fix=f"evaluate it first: {folder.evaluate_command}")
        # The folder where it is now, not where it was evaluated: its run.json is read from there.
        reports += [load_evaluation_report(report).model_copy(update={"run": str(folder.root)})
                    for report in found]
        for explained in explained_sets(folder.root, split):
            # The folder names the dataset by its key, as evaluation reports name their columns.
            key = (folder.method, bool(folder.bgaugment), explained.dataset_key, explained.label)
            foreground[key] = explained.summary
    return reports, foreground


def _map_cells(report: EvaluationReport | None) -> list[str]:
    """The clean and corrupted MAP@R cells of a run; empty where the run or its corrupted sets are absent."""
    if report is None:
        return ["", ""]
    corrupted = report.corrupted
    spread = percent_spread(corrupted.mean.map_at_r, corrupted.std.map_at_r) if corrupted else ""
    return [percent(report.clean.map_at_r), spread]


def _foreground_cell(summary: ExplainSummary | None) -> str:
    """A foreground score as the paper prints it: ``0.50 ± 0.09`` (no std: the mean alone)."""
    if summary is None or summary.mean is None:
        return ""
    std = summary.std
    return f"{summary.mean:.2f}" if std is None else f"{summary.mean:.2f} ± {std:.2f}"


def _run_numbers(report: EvaluationReport) -> dict[str, Any]:
    """One run's identity and raw MAP@R numbers (fractions, not %), for table.json."""
    corrupted = report.corrupted
    return {
        "run": report.run,
        "method": report.method,
        "bgaugment": bool(report.bgaugment),
        "dataset": report.dataset,
        "split": report.split,
        "clean_map_at_r": report.clean.map_at_r,
        "corrupted_map_at_r_mean": corrupted.mean.map_at_r if corrupted else None,
        "corrupted_map_at_r_std": corrupted.std.map_at_r if corrupted else None,
        "repeats": len(corrupted.repeats) if corrupted else 0,
        "profile_map_at_r": [
            {"set": row.set, "mean": row.mean.map_at_r, "std": row.std.map_at_r}
            for row in (report.profile.sets if report.profile else [])
        ] or None,
    }
