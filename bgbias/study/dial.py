"""The bias dial: one method's study on benches built at several background–class correlations ρ, and its
plot of the drop against ρ."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bgbias.paths import runs_root
from bgbias.report.dial import DialPoint, write_dial_report
from bgbias.report.runs_table import collect_runs
from bgbias.study.local import Slot
from bgbias.study.pipeline import run_study
from bgbias.study.plan import EXPLAIN_IMAGES, QUICK_METHODS, StudyPlan
from bgbias.study.runs import study_folder
from bgbias.study.spec import bench_spec

DIAL_RHOS = (0.0, 0.5, 0.9, 1.0)
"""The background–class correlations of the bias dial: none, half, the bench's default, always."""


DIAL_MASKS = ("ground-truth", "u2netp")
"""The dial's mask sources, the exact masks first: they need no U²-Net pass, so their curve comes first."""


@dataclass(frozen=True)
class DialResult:
    folder: Path
    points: list[Any]  # DialPoint
    report: dict[str, Path]
    failures: dict[str, str] = dataclasses.field(default_factory=dict)  # "<masks>, rho <ρ>: <run>" → error


def run_dial(
    *,
    method: str = QUICK_METHODS[0],
    seeds: int = 1,
    rhos: Sequence[float] = DIAL_RHOS,
    masks: Sequence[str] = DIAL_MASKS,
    bench_preset: str = "small",
    bench_seed: int = 0,
    runs: str | os.PathLike[str] | None = None,
    slots: Sequence[Slot] | None = None,
    explain_images: int = EXPLAIN_IMAGES,
    log: Callable[[str], None] = print,
) -> DialResult:
    """The bias dial (:mod:`bgbias.report.dial`): for each mask source and ρ, the study of ``method`` on the
    bench built at ρ, then ``dial.md``/``.png``/``.json`` in
    ``<runs>/study/dial-<method>-bench-<preset>-seed<S>``. Each point is a study of its own, so a point made
    before is reused and a killed dial resumes."""
    runs = Path(runs) if runs is not None else runs_root()
    points, failures = [], {}
    settings = [(source, rho) for source in masks for rho in rhos]
    for number, (source, rho) in enumerate(settings, 1):
        log(f"dial [{number}/{len(settings)}]: rho {rho:g}, {source} masks")
        plan = StudyPlan((method,), seeds, masks=source, explain_images=explain_images)
        spec = bench_spec(bench_preset, rho, bench_seed, source)
        result = run_study(study_folder(runs, spec), spec, plan, slots=slots, extend=True, log=log)
        failures.update({f"{source} masks, rho {rho:g}: {name}": error
                         for name, error in result.failures.items()})
        planned = {run.folder_name: run for run in plan.runs()}
        for bgaugment in (False, True):
            chosen = [path for path in result.runs if planned[path.name].bgaugment == bgaugment]
            if chosen:  # a point whose every run failed is left out of the plot; `failures` names them
                points.append(DialPoint(rho, source, bgaugment, tuple(collect_runs(chosen)[0])))
    folder = runs / "study" / f"dial-{method}-bench-{bench_preset}-seed{bench_seed}"
    report = write_dial_report(points, folder, method) if points else {}
    return DialResult(folder, points, report, failures)
