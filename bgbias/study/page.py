"""Step 7 of a study, also ``bgbias report --study``: Table 1 of the first training seed, the seeds'
aggregate and the study page."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bgbias.report.compare import compare_runs
from bgbias.report.document import Figure
from bgbias.report.folder import RUNS_REPORT_FILES, write_report_folder
from bgbias.report.runs_table import write_runs_report
from bgbias.report.seeds import write_seeds_report
from bgbias.report.study_report import collect_study_runs, first_seed, write_study_report
from bgbias.study.plan import PAPER_BASELINES


def report_study(
    run_dirs: Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    title: str,
    split: str = "test",
    dials: Sequence[Path] = (),
    failures: Mapping[str, str] | None = None,
) -> dict[str, Path]:
    """Step 7, also ``bgbias report --study``: Table 1 of the first training seed's runs, the seeds' aggregate
    (``seeds.md``) and the study page with the ``dials`` given and the runs that ``failures`` names; the files
    by name. They replace ``out_dir`` all at once or not at all (:mod:`bgbias.report.folder`)."""
    results = collect_study_runs(run_dirs, split)
    return write_report_folder(
        out_dir, lambda stage: _write_study(results, stage, title, split, dials, failures or {}),
        RUNS_REPORT_FILES)


def _write_study(results: Sequence[Any], out: Path, title: str, split: str, dials: Sequence[Path],
                 failures: Mapping[str, str]) -> dict[str, Path]:
    seed, first = first_seed(results)
    foreground = {key: summary for result in first for key, summary in result.foreground.items()}
    files = write_runs_report([result.report for result in first], foreground, out)
    files.update(write_seeds_report([result.report for result in results], out))
    # One method's pair only, vanilla then BGAugment: a gallery of every run would be megabytes wide (each
    # run's own is in its explain/ folder).
    by_key = {result.key: result.folder for result in first}
    pair = next(([by_key[(method, False)], by_key[(method, True)]] for method, _ in by_key
                 if (method, False) in by_key and (method, True) in by_key), [])
    galleries = compare_runs(pair, split, out) if pair else []
    figures = [Figure(files["runs_png"], f"clean vs corrupted MAP@R of training seed {seed}'s runs (± over "
                                         "repeats)")]
    figures += [Figure(path, f"where {pair[0].name} and {pair[1].name} look: SmoothGrad maps on shared test "
                       "images") for path in galleries]
    for run_dir in pair:
        figures.append(Figure(run_dir / "curves.png", f"training curves of {run_dir.name}"))
        figures += [Figure(path, f"retrieval gallery of {run_dir.name}: clean and corrupted queries")
                    for path in sorted(run_dir.glob(f"eval/*-{split}/retrieval-gallery.png"))]
    figures += [Figure(path, f"the bias dial ({path.parent.name})") for path in dials]
    files.update(write_study_report(results, out, title=title, reference=PAPER_BASELINES, figures=figures,
                                    failures=failures))
    return {**files, **{f"foreground_gallery_{number}": path for number, path in enumerate(galleries)}}
