"""The main job on the embedded default: the paper's whole measurement on the bench, from nothing to Table 1.

Steps: provision the assets, complete the background pools, build the bench, make its masks (U²-Net's, or lay
out its exact ones), train the plan's methods without and with BGAugment for each of its training seeds
(:data:`PRESETS`: ``quick``, one loss and one seed; ``full``, the paper's baselines and the four bundled
methods, three seeds), score every run on the clean test split and its fixed corrupted repeats (and its
background-reliance profile in the full preset), compute their foreground scores (SmoothGrad, and a method's
own attribution where it has one), and put everything in one report: Table 1 of training seed 0 and the
seeds' aggregate with BGAugment's paired effect. Each step is also a command of its own (``bgbias
assets``, ``masks``, ``train``, ``eval``, ``explain``, ``report``), and each is resumable: a second run reuses
the bench, the masks, finished trainings and cached embeddings, and resumes a killed training.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bgbias.errors import AssetError, BgbiasError, BusyError, OptionError
from bgbias.fileio import exclusive_lock, folder_lock

POOL_SEED = 0
"""Seed of the committed pools: their generated images are in the repository, so the study never reseeds
them."""


QUICK_METHODS = ("multi_similarity",)
"""The quick study's loss: Multi-Similarity, the loss of the paper's Table 1 that the bench prototype used."""
PAPER_BASELINES = ("contrastive", "triplet", "multi_similarity", "proxy_anchor", "normalized_softmax",
                   "arcface")
"""The losses of the paper's Table 1: the reference a bundled method's own mechanism is compared against."""
FULL_METHODS = (*PAPER_BASELINES, "dcml", "sam", "metricformer", "avsl")
"""The full study: the baselines of the paper's Table 1, then DCML, SAM, MetricFormer and AVSL."""
REPEATS = 5
EXPLAIN_IMAGES = 200
"""Test images whose attribution maps are scored (25 backward passes each); spread evenly over the split."""


MASK_SOURCES = ("u2netp", "ground-truth")
"""Where a study's masks come from: U²-Net (the paper's protocol; what a real dataset has) or the bench's
exact alpha masks (no mask errors, and no 6 minutes of U²-Net on 2 cores)."""


SETTING_SECTIONS = ("loss", "optim")
"""What a study's ``--set`` may change: the method's options and the optimiser, i.e. which variant of a method
it trains (a variant's runs and page get folders of their own, :func:`settings_slug`)."""


@dataclass(frozen=True)
class StudyRun:
    """One training run of a study: a method, with or without BGAugment, one training seed; ``watch_test``
    also scores the test split after every epoch (``schedule.watch_test``), to measure selection noise;
    ``settings``, ``key=value`` settings (``--set``) that make it a variant of the method."""

    method: str
    bgaugment: bool
    seed: int
    watch_test: bool = False
    settings: tuple[str, ...] = ()

    @property
    def folder_name(self) -> str:
        variant = f"-{settings_slug(self.settings)}" if self.settings else ""
        return f"{self.method}{variant}{'-bgaugment' if self.bgaugment else ''}-seed{self.seed}"

    @property
    def label(self) -> str:
        variant = f" ({', '.join(self.settings)})" if self.settings else ""
        return f"{self.method}{variant}{' + BGAugment' if self.bgaugment else ''}, seed {self.seed}"


def settings_slug(settings: Sequence[str]) -> str:
    """``("loss.certainty_min=global",)`` → ``certainty_min-global``: ``--set`` settings as part of a folder
    name (a method option without its ``loss.``; characters other than letters, digits, ``.``, ``_`` and
    ``-`` become ``_``)."""
    parts = []
    for text in settings:
        key, _, value = text.partition("=")
        parts.append(f"{key.strip().removeprefix('loss.')}-{value.strip()}")
    return "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "_" for c in "-".join(parts))


@dataclass(frozen=True)
class StudyPlan:
    """Which runs a study trains: every method without and with BGAugment, for training seeds 0 … seeds−1,
    with masks from ``masks`` (:data:`MASK_SOURCES`); the runs of the ``watched`` methods also score the
    test split after every epoch; ``profile`` adds every run's background-reliance profile; ``settings``
    (``--set``) train every run as a variant of its method."""

    methods: tuple[str, ...]
    seeds: int
    masks: str = "u2netp"
    watched: tuple[str, ...] = ()
    profile: bool = False
    settings: tuple[str, ...] = ()

    @property
    def report_folder(self) -> str:
        """Where in the study folder the plan's page goes: ``report`` for a preset as it is, else a name of
        its own (``report-dcml-avsl-3seeds``), so that a study of a few methods on the full preset's bench
        does not replace the full preset's page."""
        if self in PRESETS.values():
            return "report"
        variant = f"-{settings_slug(self.settings)}" if self.settings else ""
        return f"report-{'-'.join(self.methods)}{variant}-{self.seeds}seed{'s' * (self.seeds > 1)}"

    def runs(self) -> list[StudyRun]:
        """Seed by seed (a stopped study has whole seeds done first), each method vanilla then BGAugment."""
        return [StudyRun(method, bgaugment, seed, method in self.watched, self.settings)
                for seed in range(self.seeds) for method in self.methods for bgaugment in (False, True)]


PRESETS = {
    "quick": StudyPlan(QUICK_METHODS, 1, masks="ground-truth"),
    "full": StudyPlan(FULL_METHODS, 3, masks="u2netp", watched=QUICK_METHODS, profile=True),
}
"""``quick``: the README's first command, within 15 minutes on 2 CPU cores, on the bench's exact masks and
without profiles; ``full``: the whole comparison on U²-Net masks with every run's profile, the quick preset's
method watching the test split (selection noise, docs/results.md)."""


def study_plan(
    preset: str = "quick",
    methods: Sequence[str] | None = None,
    seeds: int | None = None,
    masks: str | None = None,
    settings: Sequence[str] = (),
) -> StudyPlan:
    """The preset's plan, with ``methods``, ``seeds`` and ``masks`` in place of its own where given, and
    ``settings`` (``key=value``, :data:`SETTING_SECTIONS` only) for every run; unknown names, fewer than one
    seed and settings a method refuses are an ``OptionError`` before any work."""
    from bgbias.engine.config import parse_override, resolve_config
    from bgbias.methods.registry import method_names

    if preset not in PRESETS:
        raise OptionError(f"unknown study preset {preset!r}", fix=f"use one of {', '.join(PRESETS)}")
    if masks is not None and masks not in MASK_SOURCES:
        raise OptionError(f"unknown mask source {masks!r}", fix=f"use one of {', '.join(MASK_SOURCES)}")
    plan = PRESETS[preset]
    chosen = tuple(dict.fromkeys(methods)) if methods else plan.methods
    unknown = [name for name in chosen if name not in method_names()]
    if unknown:
        raise OptionError(f"unknown method(s) {', '.join(unknown)}",
                          fix=f"use some of: {', '.join(method_names())}")
    if seeds is not None and seeds < 1:
        raise OptionError(f"a study needs at least one training seed, not {seeds}",
                          fix="pass --seeds 1 or more")
    for text in settings:
        key, _ = parse_override(text)
        if key.split(".")[0] not in SETTING_SECTIONS:
            raise OptionError(f"a study's --set changes method options and the optimiser, not {key}",
                              fix="set loss.KEY=VALUE or optim.KEY=VALUE; for other settings train the runs "
                                  "with `bgbias train`")
    for method in chosen:
        resolve_config(method, "bench", overrides=tuple(settings))
    return dataclasses.replace(plan, methods=chosen, seeds=plan.seeds if seeds is None else seeds,
                               masks=plan.masks if masks is None else masks, settings=tuple(settings))


@dataclass(frozen=True)
class StudyBench:
    """Steps 1–4 of a study, done: the assets, the pools, the bench (its summary and folder) and its masks."""

    assets: list[Any]  # AssetStatus rows
    pools: dict[str, Any]  # the pools' manifest
    bench: dict[str, Any]  # the bench's summary
    root: Path
    masks: Any  # MaskRun, or GroundTruthCopy for the exact masks
    masks_dir: Path


@dataclass(frozen=True)
class StudyResult:
    bench: StudyBench
    runs: list[Path]  # the runs measured, in the plan's order
    report: dict[str, Path]  # the runs report's files and the seeds report's
    failures: dict[str, str] = dataclasses.field(default_factory=dict)  # failed run folder name → error


def prepare_pools(
    out: str | os.PathLike[str] | None = None,
    *,
    seed: int = POOL_SEED,
    home: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Complete ``out/train`` and ``out/test`` (default ``./backgrounds``) from the installed photos."""
    from bgbias.backgrounds.pool import build_pools
    from bgbias.paths import backgrounds_root

    return build_pools(backgrounds_root() if out is None else Path(out), _installed_sources(home), seed)


def prepare_bench(
    out: str | os.PathLike[str] | None = None,
    *,
    preset: str = "small",
    rho: float = 0.9,
    seed: int = 0,
    home: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Build the bench into ``out`` (default ``<data-root>/bench``) from the installed stamps and scenes.

    The bench's scenes are the ``"bench"`` share of the background families, disjoint from both pools.
    """
    from bgbias.assets.store import asset_dir
    from bgbias.backgrounds.pool import assign_families
    from bgbias.bench.build import build_bench
    from bgbias.data.registry import default_root

    stamps = asset_dir("tuxpaint_stamps", home) / "stamps"
    scenes = assign_families(_installed_sources(home))["bench"]
    target = default_root("bench") if out is None else Path(out)
    summary = build_bench(target, stamps, scenes, rho=rho, seed=seed, preset=preset)
    return {"root": str(target), "preset": preset, "seed": seed, **summary}


def study_bench_root(preset: str, rho: float, seed: int) -> Path:
    """Where a study keeps the bench of these settings: ``<data-root>/bench`` for the default ones (small,
    ρ 0.9, seed 0), ``<data-root>/bench-<preset>-rho<rho>-seed<seed>`` for others, so that the dial's benches
    (and their masks and runs) live side by side instead of replacing one another."""
    from bgbias.data.registry import default_root

    default = default_root("bench")
    if (preset, rho, seed) == ("small", 0.9, 0):
        return default
    return default.with_name(f"bench-{preset}-rho{rho:g}-seed{seed}")


def built_bench(root: Path, *, preset: str, rho: float, seed: int) -> dict[str, Any] | None:
    """The summary of the bench at ``root`` when it was built by this format with these settings, else None.

    Rebuilding would give the same bytes but new files, which would void the masks and embeddings made of
    them; the study therefore keeps a bench that matches.
    """

    from bgbias.bench.build import BENCH_FORMAT

    try:
        description = json.loads((root / "bench.json").read_text(encoding="utf-8"))
        parameters = description["parameters"]
        if description["format"] != BENCH_FORMAT or (parameters["preset"], parameters["rho"],
                                                     parameters["seed"]) != (preset, rho, seed):
            return None
        return {"root": str(root), "preset": preset, "seed": seed, **description["summary"]}
    except (OSError, ValueError, KeyError, TypeError):
        return None


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
    """Run every step of the study (module docstring) for ``plan``; ``runs`` defaults to ``./runs``, the
    study's runs go to ``<runs>/study/bench-<bench_preset>-rho<rho>-seed<bench_seed>-<masks>/<method>
    [-<settings>][-bgaugment]-seed<S>``. A run that fails is left out of the report and named in the result's
    ``failures`` (and :data:`FAILURES`); when every run fails there is no report. Without ``report`` the
    page is not written: the dial's points share their folders with other studies (the full preset's runs at
    ρ 0.9), whose page it must not replace."""
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


def report_study(
    run_dirs: Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    title: str,
    split: str = "test",
    dials: Sequence[Path] = (),
    failures: Mapping[str, str] | None = None,
) -> dict[str, Path]:
    """Step 7, also ``bgbias report --study``: Table 1 of the first training seed's runs (``table.md``,
    ``runs.png``, the foreground galleries), the seeds' aggregate (``seeds.md``) and the study page
    (``study.md``, ``study.html``) with the figures of the first method's pair, the ``dials`` given and the
    runs that ``failures`` names; the files by name. They replace ``out_dir`` all at once or not at all
    (:mod:`bgbias.report.folder`): a failure leaves an older report as it was."""
    from bgbias.report.folder import RUNS_REPORT_FILES, write_report_folder
    from bgbias.report.study_report import collect_study_runs

    results = collect_study_runs(run_dirs, split)
    return write_report_folder(
        out_dir, lambda stage: _write_study(results, stage, title, split, dials, failures or {}),
        RUNS_REPORT_FILES)


def _write_study(results: Sequence[Any], out: Path, title: str, split: str, dials: Sequence[Path],
                 failures: Mapping[str, str]) -> dict[str, Path]:
    from bgbias.report.compare import compare_runs
    from bgbias.report.document import Figure
    from bgbias.report.runs_table import write_runs_report
    from bgbias.report.seeds import write_seeds_report
    from bgbias.report.study_report import first_seed, write_study_report

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
        # A run trained before bgbias drew curves has none; its galleries still go in.
        figures += [Figure(path, f"training curves of {run_dir.name}") for path in [run_dir / "curves.png"]
                    if path.is_file()]
        figures += [Figure(path, f"retrieval gallery of {run_dir.name}: clean and corrupted queries")
                    for path in sorted(run_dir.glob(f"eval/*-{split}/retrieval-gallery.png"))]
    figures += [Figure(path, f"the bias dial ({path.parent.name})") for path in dials]
    files.update(write_study_report(results, out, title=title, reference=PAPER_BASELINES, figures=figures,
                                    failures=failures))
    return {**files, **{f"foreground_gallery_{number}": path for number, path in enumerate(galleries)}}


def study_folder(runs: Path, bench_preset: str, rho: float, bench_seed: int, masks: str) -> Path:
    """The folder of a study's runs: one per bench and mask source."""
    return runs / "study" / f"bench-{bench_preset}-rho{rho:g}-seed{bench_seed}-{masks}"


def prepare_study_bench(
    masks: str,
    preset: str,
    rho: float,
    seed: int,
    home: str | os.PathLike[str] | None,
    log: Callable[[str], None],
) -> StudyBench:
    """Steps 1–4: the assets (verified), the pools, the bench of these settings (kept when it matches) and
    its masks from ``masks`` (:data:`MASK_SOURCES`)."""
    from bgbias.assets.catalog import DEFAULT_ASSETS
    from bgbias.assets.fetch import fetch
    from bgbias.data.registry import open_dataset

    log("1/7 fetching assets (verified against pinned checksums)")
    assets = fetch(DEFAULT_ASSETS, home=home)
    log("2/7 completing the background pools")
    pools = prepare_pools(home=home)
    root = study_bench_root(preset, rho, seed)
    # Another study building this bench or its masks is waited for, and what it made is then kept.
    with folder_lock(root):
        bench = built_bench(root, preset=preset, rho=rho, seed=seed)
        if bench is None:
            log(f"3/7 building the bench (preset {preset}, rho {rho:g}, seed {seed}) in {root}")
            bench = prepare_bench(root, preset=preset, rho=rho, seed=seed, home=home)
        else:
            log(f"3/7 the bench at {root} is up to date (preset {preset}, rho {rho:g}, seed {seed})")
        made, masks_dir = bench_masks(open_dataset("bench", root), masks, log)
    return StudyBench(assets, pools, bench, root, made, masks_dir)


FAILURES = "failures.json"
"""In a study folder, the runs that failed in the study's last pass: each run's folder name → its error, the
fix where bgbias knows one, and the traceback. A later pass tries each again (a failed training resumes from
its last checkpoint) and rewrites the file; without failures there is no file."""


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
        recorded = read_record(path, dict[str, dict[str, str]], what="the study's failures",
                               fix="the next bgbias study writes it again")
    except RecordError:  # none yet, or damaged: this pass's runs are what it can vouch for
        recorded = {}
    kept = {name: entry for name, entry in recorded.items() if name not in planned}
    kept.update({name: {"error": error, "traceback": tracebacks.get(name, "")}
                 for name, error in failures.items()})
    if kept:
        write_json_atomic(path, kept)
    else:
        path.unlink(missing_ok=True)


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
    home: str | os.PathLike[str] | None = None,
    runs: str | os.PathLike[str] | None = None,
    device: str = "auto",
    log: Callable[[str], None] = print,
) -> DialResult:
    """The bias dial (:mod:`bgbias.report.dial`): for each mask source and ρ, the study of ``method`` on the
    bench built at ρ (its own folder, :func:`study_bench_root`), then ``dial.md`` / ``dial.png`` /
    ``dial.json`` in ``<runs>/study/dial-<method>-bench-<preset>-seed<S>``. Each point is a study of its own,
    so a point the full study or an earlier dial made is reused, and a killed dial resumes."""
    from bgbias.paths import runs_root
    from bgbias.report.dial import DialPoint, write_dial_report
    from bgbias.report.runs_table import collect_runs

    runs = Path(runs) if runs is not None else runs_root()
    points, failures = [], {}
    settings = [(source, rho) for source in masks for rho in rhos]
    for number, (source, rho) in enumerate(settings, 1):
        log(f"dial [{number}/{len(settings)}]: rho {rho:g}, {source} masks")
        plan = StudyPlan((method,), seeds, masks=source)
        result = run_study(plan=plan, bench_preset=bench_preset, rho=rho, bench_seed=bench_seed, home=home,
                           runs=runs, device=device, log=log, report=False)
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


def bench_masks(dataset: Any, source: str, log: Callable[[str], None]) -> tuple[Any, Path]:
    """The bench's masks from ``source`` (:data:`MASK_SOURCES`), made or laid out where missing: the
    ``MaskRun`` or ``GroundTruthCopy`` and the folder."""
    from bgbias.data.items import default_masks_dir
    from bgbias.saliency.ground_truth import copy_ground_truth_masks, default_ground_truth_dir
    from bgbias.saliency.pipeline import make_masks

    if source == "ground-truth":
        log("4/7 the bench's exact masks, laid out for BGAugment and the corrupted sets")
        copied = copy_ground_truth_masks(dataset.items(), default_ground_truth_dir(dataset))
        return copied, copied.out_dir
    log("4/7 U²-Net masks of the bench (u2netp; kept when already made)")
    masks = make_masks(dataset.items(), default_masks_dir(dataset), model="u2netp")
    if masks.failed:
        raise AssetError(f"{masks.failed} bench image(s) got no mask", path=masks.manifest,
                         fix="see the failures in the manifest, then run `bgbias study` again")
    return masks, default_masks_dir(dataset)


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
        status = (read_record(open_run_dir(run_dir)) or {}).get("status")
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


def _installed_sources(home: str | os.PathLike[str] | None) -> list[Any]:
    from bgbias.backgrounds.sources import background_sources

    sources = background_sources(home)
    if not sources:
        raise AssetError(
            "no background photographs are installed",
            fix="run `bgbias assets fetch` (offline: add --from DIR holding the .deb archives)",
        )
    return sources
