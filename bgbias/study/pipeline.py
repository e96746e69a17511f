"""The whole study, steps 1–7 (:mod:`bgbias.study`), for one plan on one bench."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bgbias.fileio import exclusive_lock
from bgbias.study.bench import StudyBench, prepare_study_bench
from bgbias.study.page import report_study
from bgbias.study.plan import PRESETS, StudyPlan
from bgbias.study.runs import FAILURES, STUDY_LOCK, study_folder, train_and_measure


@dataclass(frozen=True)
class StudyResult:
    bench: StudyBench
    runs: list[Path]  # the runs measured, in the plan's order
    report: dict[str, Path]  # the runs report's files and the seeds report's
    failures: dict[str, str] = dataclasses.field(default_factory=dict)  # failed run folder name → error


def run_study(
    *,
    plan: StudyPlan = PRESETS["quick"],
    bench_preset: str = "small",
    rho: float = 0.9,
    bench_seed: int = 0,
    home: str | os.PathLike[str] | None = None,
    runs: str | os.PathLike[str] | None = None,
    device: str = "auto",
    log: Callable[[str], None] = print,
    report: bool = True,
) -> StudyResult:
    """Run every step of the study (:mod:`bgbias.study`) for ``plan``; ``runs`` defaults to ``./runs``, the
    study's runs go to ``<runs>/study/bench-<bench_preset>-rho<rho>-seed<bench_seed>-<masks>/<method>
    [-<settings>][-bgaugment]-seed<S>``. A run that fails is left out of the report and named in the result's
    ``failures`` (and :data:`~bgbias.study.runs.FAILURES`); when every run fails there is no report. Without
    ``report`` the page is not written: the dial's points share their folders with other studies (the full
    preset's runs at ρ 0.9), whose page it must not replace."""
    from bgbias.paths import runs_root

    bench = prepare_study_bench(plan.masks, bench_preset, rho, bench_seed, home, log)
    runs_dir = Path(runs) if runs is not None else runs_root()
    folder = study_folder(runs_dir, bench_preset, rho, bench_seed, plan.masks)
    run_dirs, failures = train_and_measure(plan, bench, folder, device, log)
    if not run_dirs:
        log(f"7/7 no report: every run failed (see {folder / FAILURES})")
    if not run_dirs or not report:
        return StudyResult(bench, run_dirs, {}, failures)
    log("7/7 the report")
    variant = f", every run with {', '.join(plan.settings)}" if plan.settings else ""
    title = (f"bgbias study: bench {bench_preset}, rho {rho:g}, bench seed {bench_seed}, {plan.masks} masks, "
             f"{len(run_dirs)} runs{variant}")
    dials = sorted((runs_dir / "study").glob(f"dial-*-bench-{bench_preset}-seed{bench_seed}/dial.png"))
    with exclusive_lock(folder / STUDY_LOCK, wait=True):
        page = report_study(run_dirs, folder / plan.report_folder, title=title, dials=dials,
                            failures=failures)
    return StudyResult(bench, run_dirs, page, failures)
