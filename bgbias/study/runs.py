"""Steps 5–6 of a study: train (or keep, or resume) each planned run while holding its folder, then measure it
(evaluation and foreground scores); a run that fails is recorded and the others go on."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bgbias.errors import BgbiasError, BusyError, OptionError
from bgbias.fileio import exclusive_lock
from bgbias.schema import Record
from bgbias.study.bench import StudyBench
from bgbias.study.plan import SETTING_SECTIONS, StudyPlan, StudyRun

REPEATS = 5


EXPLAIN_IMAGES = 200
"""Test images whose attribution maps are scored (25 backward passes each); spread evenly over the split."""


def study_folder(runs: Path, bench_preset: str, rho: float, bench_seed: int, masks: str) -> Path:
    """The folder of a study's runs: one per bench and mask source."""
    return runs / "study" / f"bench-{bench_preset}-rho{rho:g}-seed{bench_seed}-{masks}"


FAILURES = "failures.json"
"""In a study folder, the runs that failed in the study's last pass: each run's folder name → its error, the
fix where bgbias knows one, and the traceback. A later pass tries each again (a failed training resumes from
its last checkpoint) and rewrites the file; without failures there is no file."""


class FailedRun(Record):
    """A run's entry in :data:`FAILURES`."""

    error: str
    traceback: str


def train_and_measure(
    plan: StudyPlan, bench: StudyBench, folder: Path, device: str, log: Callable[[str], None]
) -> tuple[list[Path], dict[str, str]]:
    """Steps 5–6: train (or keep, or resume) every run of ``plan`` into ``folder``, then evaluate and explain
    it. A run that fails is recorded in :data:`FAILURES` and the study goes on with the others. A run that
    another process is training or measuring (a second pass on the same folder) is left to it until the
    other runs are done; then this pass waits for it and measures it from the caches, so two passes share
    the work. Returns the folders of the runs measured, in the plan's order, and the failed runs' errors by
    folder name."""
    planned = plan.runs()
    log(f"5/7 training {len(planned)} runs: {', '.join(plan.methods)}, without and with BGAugment, "
        f"{plan.seeds} training seed{'s' * (plan.seeds > 1)}")
    outcome = _PassOutcome()
    elsewhere = []
    for number, run in enumerate(planned, 1):
        step = f"[{number}/{len(planned)}]"
        if not _train_and_measure_run(folder, run, plan, bench, device, log, step, outcome, wait=False):
            log(f"5/7 {step} {run.label}: another process is training it; measured at the end")
            elsewhere.append((step, run))
    for step, run in elsewhere:
        log(f"5/7 {step} {run.label}: waiting for the other process to finish it")
        _train_and_measure_run(folder, run, plan, bench, device, log, step, outcome, wait=True)
    with exclusive_lock(folder / STUDY_LOCK, wait=True):  # another pass may update the file meanwhile
        record_failures(folder / FAILURES, [run.folder_name for run in planned], outcome.failures,
                        outcome.tracebacks)
    run_dirs = [outcome.measured[run.folder_name] for run in planned if run.folder_name in outcome.measured]
    return run_dirs, outcome.failures


STUDY_LOCK = ".study.lock"
"""In a study folder: held while a pass updates :data:`FAILURES` or writes the page, which two passes on the
same folder would otherwise write at once."""


@dataclass
class _PassOutcome:
    """What one pass of steps 5–6 measured, and what failed (the error and its traceback), by run folder."""

    measured: dict[str, Path] = dataclasses.field(default_factory=dict)
    failures: dict[str, str] = dataclasses.field(default_factory=dict)
    tracebacks: dict[str, str] = dataclasses.field(default_factory=dict)


def _train_and_measure_run(
    folder: Path, run: StudyRun, plan: StudyPlan, bench: StudyBench, device: str, log: Callable[[str], None],
    step: str, outcome: _PassOutcome, *, wait: bool,
) -> bool:
    """Train and measure one run while holding its folder (:func:`~bgbias.engine.run_dir.claim_run`), into
    ``outcome``; False, without doing anything, when another process holds it and not ``wait``."""
    from bgbias.engine.run_dir import claim_run

    try:
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(claim_run(folder / run.folder_name, wait=wait))
            except BusyError:
                return False
            run_dir = train_study_run(folder, run, bench, device, log, f"5/7 {step}")
            log(f"6/7 {step} {run.label}: clean and {REPEATS} corrupted repeats"
                f"{', the profile' if plan.profile else ''}, foreground scores on {EXPLAIN_IMAGES} test "
                "images")
            measure_run(run_dir, bench.masks_dir, plan.profile, device, log)
    except Exception as error:  # one run's failure (a diverged loss, a full disk) must not stop the rest
        known = isinstance(error, BgbiasError)
        outcome.failures[run.folder_name] = str(error) if known else f"{type(error).__name__}: {error}"
        outcome.tracebacks[run.folder_name] = traceback.format_exc()
        log(f"{step} {run.label} FAILED, going on with the others:\n{outcome.failures[run.folder_name]}")
        return True
    outcome.measured[run.folder_name] = run_dir
    return True


def record_failures(path: Path, planned: Sequence[str], failures: Mapping[str, str],
                    tracebacks: Mapping[str, str]) -> None:
    """Update :data:`FAILURES` (atomically) for the ``planned`` runs: their entries replaced by this pass's
    ``failures``, other plans' entries kept (the dial's point at ρ 0.9 shares the full preset's folder); the
    file is removed when nothing is left in it."""
    from bgbias.errors import RecordError
    from bgbias.fileio import write_json_atomic
    from bgbias.schema import read_record

    try:
        recorded = read_record(path, dict[str, FailedRun], what="the study's failures",
                               fix="the next bgbias study writes it again")
    except RecordError:  # none yet, or damaged: this pass's runs are what it can vouch for
        recorded = {}
    kept = {name: entry.model_dump() for name, entry in recorded.items() if name not in planned}
    kept.update({name: {"error": error, "traceback": tracebacks.get(name, "")}
                 for name, error in failures.items()})
    if kept:
        write_json_atomic(path, kept)
    else:
        path.unlink(missing_ok=True)


def train_study_run(
    folder: Path, run: StudyRun, bench: StudyBench, device: str, log: Callable[[str], None], step: str
) -> Path:
    """Train (or resume, or keep) one run of the study on ``bench`` with its masks; return its folder."""
    from bgbias.engine.config import resolve_config
    from bgbias.engine.run_dir import DONE, open_run_dir, read_record
    from bgbias.engine.training import resume_training, train

    run_dir = folder / run.folder_name
    if (run_dir / "config.json").is_file():
        check_trained_as_planned(run_dir, run)
        # A missing or damaged run.json reads as unfinished: resuming from the checkpoints writes it again.
        record = read_record(open_run_dir(run_dir))
        status = None if record is None else record.status
        if status in DONE:
            log(f"{step} {run.label}: trained already ({run_dir})")
            return run_dir
        log(f"{step} resuming {run.label} ({run_dir})")
        resume_training(run_dir)
        return run_dir
    log(f"{step} training {run.label} on the bench")
    options = {"root": str(bench.root), "bgaugment.enabled": run.bgaugment,
               "bgaugment.masks": str(bench.masks_dir), "device": device, "seed": run.seed,
               "schedule.watch_test": run.watch_test}
    config = resolve_config(run.method, "bench", options=options, overrides=run.settings)
    train(config, run_dir=run_dir)
    return run_dir


def check_trained_as_planned(run_dir: Path, run: StudyRun) -> None:
    """Refuse to keep or resume a run folder whose method options or optimiser settings are not the ones
    the plan trains now (a default changed since, as AVSL's certainty did): its numbers would appear under
    the plan's name. The fix names the folder where ``--set`` with the run's own settings finds it. A
    configuration that cannot be read is left to resuming, which reports it."""
    from bgbias.engine.config import load_run_config, parse_override, resolve_config

    try:
        saved = load_run_config(run_dir / "config.json").as_dict()
    except OptionError:
        return
    planned = resolve_config(run.method, "bench", overrides=run.settings).as_dict()
    differ = {
        f"{section}.{key}": (saved[section].get(key), planned[section].get(key))
        for section in SETTING_SECTIONS for key in sorted(saved[section].keys() | planned[section].keys())
        if saved[section].get(key) != planned[section].get(key)
    }
    if not differ:
        return
    own = dict(parse_override(text) for text in run.settings)
    own.update({key: ran for key, (ran, _) in differ.items()})
    settings = tuple(f"{key}={_setting_text(value)}" for key, value in own.items())
    variant = dataclasses.replace(run, settings=settings)
    found = "; ".join(f"{key} = {_setting_text(ran)} (the plan: {_setting_text(now)})"
                      for key, (ran, now) in differ.items())
    raise OptionError(
        f"the run folder holds a run trained with other settings than the study trains now: {found}",
        path=run_dir,
        fix=f"move the folder aside to train the run again as planned, or rename it to {variant.folder_name} "
            f"to keep it as the variant that `bgbias study ... --set {' --set '.join(variant.settings)}` "
            "studies",
    )


def _setting_text(value: Any) -> str:
    """A value as ``--set`` reads it back: JSON, a string bare unless it would read as something else."""
    if isinstance(value, str):
        try:
            json.loads(value)
        except ValueError:
            return value
    return json.dumps(value)


def measure_run(run_dir: Path, masks: Path, profile: bool, device: str, log: Callable[[str], None]) -> None:
    """``bgbias eval --corrupted --repeats 5 [--profile --worst-k 5] --masks MASKS`` and ``bgbias explain``
    of one study run (SmoothGrad, and the method's own attribution where it has one); what was measured
    before comes from the caches. The profile's worst case is over the paper's 5 repeats, which keeps it to
    13 embedding passes beyond them."""
    from bgbias.engine.request import MeasureRequest
    from bgbias.engine.trained import load_trained
    from bgbias.explain.run import explain
    from bgbias.methods.registry import method_class
    from bgbias.report.evaluate import evaluate

    trained = load_trained(run_dir, device=device)
    # A run profiled before (the full study's, reused by the dial) keeps its profile: it comes from the cache.
    profile = profile or any((run_dir / "eval").glob("*-test/profile.csv"))
    request = MeasureRequest(corrupted=True, repeats=REPEATS, profile=profile, worst_k=REPEATS,
                             limit=EXPLAIN_IMAGES, masks=masks)
    evaluate(trained, request, log=log)
    explain(trained, request, log=log)
    own = method_class(trained.config.method).own_attribution
    if own is not None:
        explain(trained, dataclasses.replace(request, attribution=own), log=log)
