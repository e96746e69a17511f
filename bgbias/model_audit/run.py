"""``bgbias audit``: several models scored side by side on one split of one dataset, each through the paths
``bgbias eval --profile`` and ``bgbias leakage`` take, into one ranked page (docs/audit.md).

Every model meets the same images (masks checked once, before any model). A model that fails is recorded
with its error and the others go on; a finished model is kept by the key of what determined its numbers, so
running the same command again after a kill measures only the rest.
"""

from __future__ import annotations

import hashlib
import json
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bgbias.backgrounds.pool import list_pool
from bgbias.bgaugment.mask_check import saliency_masks
from bgbias.corrupted.manifests import split_pool_dir
from bgbias.data.items import default_masks_dir
from bgbias.data.splits import split_items
from bgbias.engine.embedding_cache import files_fingerprint
from bgbias.engine.eta import duration, time_left
from bgbias.engine.trained import is_run_path
from bgbias.errors import OptionError, given
from bgbias.fileio import holds_files, make_dirs
from bgbias.leakage_meter.meter import measure_leakage
from bgbias.measurement.intervals import PairedDifference
from bgbias.measurement.request import OWN_IMAGES, MeasureRequest
from bgbias.measurement.summary import finite_or_none
from bgbias.methods.embedding_model import EmbeddingModel
from bgbias.model_audit.adjacent import adjacent_comparisons
from bgbias.model_audit.entries import ModelEntry
from bgbias.model_audit.outcome import AuditScores, ModelOutcome, read_outcome, write_outcome
from bgbias.model_audit.page import AUDIT_NAME, AuditPage, ranked, ranks, table, write_audit_page
from bgbias.paths import runs_root
from bgbias.report.document import to_markdown
from bgbias.report.evaluate import evaluate
from bgbias.report.folder import refuse_model_folder
from bgbias.saliency.records import masks_record

if TYPE_CHECKING:
    from bgbias.data.items import Dataset
    from bgbias.leakage_meter.result import DatasetLeakage
    from bgbias.measurement.record import EvaluationReport

MODELS_FOLDER = "models"
"""Under the audit's folder: one folder per model."""
LEAKAGE_FOLDER = "leakage"
"""Under a model's folder: its ``leakage.json``, ``leakage.md`` and picture."""
KEY_VERSION = 2
"""Part of every model's key: raised when what the audit measures changes, so older outcomes are redone."""

Loader = Callable[[ModelEntry, Path], "EmbeddingModel"]
"""Loads an entry's model, its outside home (where it has one) under the given folder."""


@dataclass(frozen=True)
class AuditSettings:
    """What every model of an audit is measured with (the command's options)."""

    split: str = "test"
    split_reason: str | None = None
    """Why this split (:func:`audit_split`); the page says it."""
    repeats: int = 5
    seed: int = 0
    fill: str = "inpainted"
    masks: Path | None = None
    backgrounds: Path | None = None
    batch_size: int = 64
    workers: int | None = None
    progress: bool = False

    def masks_dir(self, dataset: Dataset) -> Path:
        """The masks every model is measured with: ``masks``, else the dataset's default folder."""
        return Path(self.masks) if self.masks is not None else default_masks_dir(dataset)

    def key_fields(self) -> dict[str, Any]:
        """The settings that change a model's numbers (batch size, workers and progress do not)."""
        return {"split": self.split, "repeats": self.repeats, "seed": self.seed, "fill": self.fill,
                "backgrounds": None if self.backgrounds is None else str(Path(self.backgrounds).resolve())}


def audit_models(
    dataset: Dataset,
    entries: Sequence[ModelEntry],
    load: Loader,
    settings: AuditSettings,
    out: Path,
    *,
    log: Callable[[str], None] = print,
) -> list[ModelOutcome]:
    """Each entry's outcome, in the entries' order, its record written into its folder under ``out`` as soon
    as it is known; a finished model whose key still holds is read back, not measured."""
    items = split_items(dataset, settings.split)
    masks_dir = settings.masks_dir(dataset)
    # Every model needs them: a missing mask or an incomplete pool stops the audit here, with bgbias eval's
    # error and fix, instead of failing each model alike.
    masks_print = files_fingerprint(saliency_masks(items, masks_dir, dataset.name))
    list_pool(split_pool_dir(settings.split, settings.backgrounds))
    images_print = files_fingerprint(item.image for item in items)
    data_key = None if masks_print is None or images_print is None else {
        "dataset": dataset.identity(), "images": images_print, "masks": masks_print}
    log(f"audit of {len(entries)} model{'s' * (len(entries) != 1)} × {len(items)} {settings.split} images "
        f"(each: clean, {settings.repeats} corrupted repeats, the profile's variants and the leakage pass); "
        f"the time left follows each model")
    outcomes, measured, seconds = [], 0, 0.0
    for number, entry in enumerate(entries, 1):
        log(f"[{number}/{len(entries)}] {entry.label}")
        started = time.perf_counter()
        outcome, kept = _audit_one(dataset, entry, load, settings, masks_dir, data_key, out, log)
        outcomes.append(outcome)
        if not kept:  # a model read back from an earlier audit says nothing of the pace
            measured, seconds = measured + 1, seconds + time.perf_counter() - started
        if measured and number < len(entries):
            left = len(entries) - number
            log(f"[{number}/{len(entries)}] {entry.label}: {duration(time.perf_counter() - started)}; "
                f"{time_left(measured, measured + left, seconds)} model{'s' * (left != 1)}")
    return outcomes


def _audit_one(
    dataset: Dataset,
    entry: ModelEntry,
    load: Loader,
    settings: AuditSettings,
    masks_dir: Path,
    data_key: dict[str, Any] | None,
    out: Path,
    log: Callable[[str], None],
) -> tuple[ModelOutcome, bool]:
    """The entry's outcome, and whether it was kept from an earlier audit (not measured)."""
    folder = make_dirs(out / MODELS_FOLDER / entry.folder_name())
    given = {"label": entry.label, "spec": entry.spec, "args": entry.args,
             "folder": (Path(MODELS_FOLDER) / folder.name).as_posix()}
    try:
        model = load(entry, folder)
        key = None if data_key is None else _key(model, data_key, settings)
        kept = read_outcome(folder)
        if key is not None and kept is not None and kept.status == "done" and kept.key == key:
            log(f"{entry.label}: kept from an earlier audit (same model, data and settings)")
            return kept, True
        report_dir, report, leakage = _measure(dataset, model, settings, masks_dir, folder, log)
        # The model's description as JSON holds it (paths and other objects as text).
        described = json.loads(json.dumps(model.describe(), sort_keys=True, default=str))
        outcome = ModelOutcome(**given, status="done", key=key, model=described,
                               report=_shown_path(report_dir, out),
                               leakage_record=_shown_path(folder / LEAKAGE_FOLDER / "leakage.json", out),
                               scores=scores_of(report, leakage))
    except Exception as err:  # a model is someone else's code: whatever it raises, the audit goes on
        log(f"{entry.label}: failed: {err}")
        outcome = ModelOutcome(**given, status="failed", error=f"{type(err).__name__}: {err}",
                               traceback="".join(traceback.format_exception(err)))
    write_outcome(folder, outcome)
    return outcome, False


def _measure(
    dataset: Dataset, model: EmbeddingModel, settings: AuditSettings, masks_dir: Path, folder: Path,
    log: Callable[[str], None],
) -> tuple[Path, EvaluationReport, DatasetLeakage]:
    """``bgbias eval --profile`` (the worst case over the paper's repeats) and ``bgbias leakage`` of one
    model, each writing its own files."""
    request = MeasureRequest(dataset=dataset, split=settings.split, masks=masks_dir, corrupted=True,
                             repeats=settings.repeats, seed=settings.seed, backgrounds=settings.backgrounds,
                             profile=True, worst_k=settings.repeats, batch_size=settings.batch_size,
                             workers=settings.workers, progress=settings.progress)
    result = evaluate(model, request, log=log, write=True)
    leakage = measure_leakage(dataset, model, split=settings.split, masks_dir=masks_dir, fill=settings.fill,
                              batch_size=settings.batch_size, workers=settings.workers, seed=settings.seed,
                              progress=settings.progress, out=folder / LEAKAGE_FOLDER)
    if result.out_dir is None:
        raise AssertionError("an evaluation asked to write came back without its folder")
    return result.out_dir, result.report, leakage


def _key(model: EmbeddingModel, data_key: dict[str, Any], settings: AuditSettings) -> str:
    identity = {"version": KEY_VERSION, "model": model.fingerprint(), **data_key, **settings.key_fields()}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def scores_of(report: EvaluationReport, leakage: DatasetLeakage) -> AuditScores:
    """The numbers the page shows, from the model's evaluation report and its leakage record."""
    corrupted = report.corrupted
    drop = (report.drop or {}).get("map_at_r")
    profile = {row.set: row.mean.map_at_r for row in report.profile.sets} if report.profile else {}
    parts = ((report.profile.decomposition or {}) if report.profile else {}).get("map_at_r")
    return AuditScores(
        clean_map_at_r=report.clean.map_at_r, clean_precision_at_1=report.clean.precision_at_1,
        corrupted_map_at_r=None if corrupted is None else corrupted.mean.map_at_r,
        corrupted_map_at_r_std=None if corrupted is None else corrupted.std.map_at_r,
        corrupted_repeats=0 if corrupted is None else len(corrupted.repeats),
        relative_drop=None if drop is None else drop.relative, profile=profile,
        paste_cost=_estimate(None if parts is None else parts.paste_cost),
        background_effect=_estimate(None if parts is None else parts.background_effect),
        leakage=finite_or_none(leakage.leakage),
        leakage_interval=[finite_or_none(value) for value in leakage.interval],
        background_map_at_r=finite_or_none(leakage.background.map_at_r),
        foreground_map_at_r=finite_or_none(leakage.foreground.map_at_r),
        chance_map_at_r=finite_or_none(leakage.chance.map_at_r),
        images=report.images, empty_masks=None if report.empty_masks is None else report.empty_masks.images,
    )


def _estimate(part: PairedDifference | None) -> float | None:
    return None if part is None else part.difference.estimate


def _shown_path(path: Path, out: Path) -> str:
    """``path`` relative to the audit's folder where it lies inside (so the folder can move), else as is."""
    path, out = path.resolve(), out.resolve()
    return path.relative_to(out).as_posix() if path.is_relative_to(out) else str(path)


@dataclass(frozen=True)
class AuditResult:
    """The audit's page (the models ranked), its folder and the files written there."""

    out_dir: Path
    page: AuditPage
    files: dict[str, Path]

    @property
    def failed(self) -> tuple[ModelOutcome, ...]:
        """The models that failed (the command then exits with status 3)."""
        return self.page.failed

    def summary(self) -> str:
        """The ranked table as Markdown, for the terminal."""
        return to_markdown([table(self.page)], self.out_dir)


def run_audit(
    dataset: Dataset,
    entries: Sequence[ModelEntry],
    load: Loader,
    settings: AuditSettings,
    out: Path,
    *,
    log: Callable[[str], None] = print,
) -> AuditResult:
    """Audit ``entries`` on ``dataset`` into ``out`` (a new or empty folder, or an earlier audit's) and write
    the page; the result lists the models that failed."""
    check_audit_folder(out)
    outcomes = audit_models(dataset, entries, load, settings, out, log=log)
    masks_dir = settings.masks_dir(dataset)
    shown = {**settings.key_fields(), **masks_record(masks_dir), "split_reason": settings.split_reason}
    order = ranked(outcomes)
    adjacent = adjacent_comparisons([(rank, outcome) for rank, outcome in ranks(order) if rank is not None],
                                    out)
    page = AuditPage(dataset.name, settings.split, shown, order, adjacent)
    return AuditResult(out, page, write_audit_page(page, out))


def audit_split(dataset: Dataset, entries: Sequence[ModelEntry], asked: str | None) -> tuple[str, str]:
    """The split every model of an audit is scored on, and why, as ``bgbias eval`` chooses it
    (:func:`~bgbias.measurement.request.chosen_split`): the one asked for; else ``all`` on one's own images
    when no model is a run bgbias trained (a run's training classes would be scored too); else ``test``."""
    if asked is not None:
        return asked, f"{asked}, as asked"
    runs = [entry.label for entry in entries if (
        is_run_path(entry.model) if isinstance(entry.model, str) else
        isinstance(entry.model, EmbeddingModel) and entry.model.trained_on() is not None)]
    if dataset.name not in OWN_IMAGES:
        return "test", "test, the held-out classes (the default)"
    if runs:
        return "test", (f"test, the held-out classes: the default on one's own images when a model is a run "
                        f"bgbias trained ({runs[0]})")
    return "all", ("all, every image as query and gallery: the default for models bgbias did not train, on "
                   "one's own images (the test split would score only the second half of the classes)")


def default_audit_folder(dataset: Dataset, split: str) -> Path:
    """``runs/audit/<dataset key>-<split>``: one folder per dataset and split, so a second audit of the same
    data reuses the first's finished models."""
    return runs_root() / "audit" / f"{dataset.key}-{split}"


def check_audit_folder(out: Path) -> None:
    """Refuse an audit folder that is, or lies inside, a run's or a model's folder, or that holds anything but
    an earlier audit."""
    refuse_model_folder(out, "the audit's folder", "its pages", parameter="out",
                        fix=f"pass {given('DIR')} outside runs and model folders")
    if out.exists() and not out.is_dir():
        raise OptionError("the audit's folder is a file", path=out,
                          fix=f"pass {given('DIR')}, a new or empty folder", parameter="out")
    ours = {AUDIT_NAME + suffix for suffix in (".md", ".html", ".json")} | {MODELS_FOLDER}
    others = sorted(entry.name for entry in out.iterdir() if entry.name not in ours) if out.is_dir() else []
    if holds_files(out) and others and not (out / MODELS_FOLDER).is_dir():
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        raise OptionError(f"the audit's folder is neither new, nor empty, nor an earlier audit's: it holds "
                          f"{shown}", path=out,
                          fix=f"pass {given('DIR')}, a new or empty folder or an earlier audit's",
                          parameter="out")
