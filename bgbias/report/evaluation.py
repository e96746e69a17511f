"""The evaluation report of one run: clean vs corrupted retrieval scores, their drop, and who suffers most.

The paper's code needed two notebooks to turn test logs into its Table 1 and never said which classes or
images lose most when the background changes (docs/design.md, *Reports*). Here :func:`summarize_evaluation`
turns the :class:`~bgbias.retrieval.metrics.RetrievalScores` of the clean split and of each corrupted repeat
into one JSON-ready dict (``None`` where a value does not exist: JSON has no NaN), what ``report.json`` holds;
:func:`evaluation_record` reads that dict into the typed :class:`EvaluationReport` every renderer and caller
reads (``report.corrupted.mean.map_at_r``), and :func:`write_evaluation_report` writes the dict as JSON and
the record as CSV and Markdown, next to a per-query table.

Conventions, as in the paper and the paper's code: the corrupted value is the mean over repeats ± the sample
standard deviation (``ddof=1``, what pandas' ``.std()`` gives); the clean value is a single number; queries
alone in their class have no score and are left out of every mean, per class included.

Images whose saliency mask shows no object (:func:`~bgbias.bgaugment.mask_check.empty_masks`) have a
corrupted copy that is the new background alone, so their drop says nothing about background reliance. They
are scored as every image is (the paper's number stays the paper's), and flagged: counted per class, marked
per image, and the headline is given a second time over the other queries (they stay in the gallery, so no
other query's ranking changes).

``report.md`` reads from what a user asks first to what they check last: the headline (clean vs corrupted,
the drop, what was scored), then the classes and images, then the profile, and the setup (versions,
options, checksums) last. Classes are shown by the names the dataset gives them, as text.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field

from bgbias.data.items import shown_class
from bgbias.errors import OptionError
from bgbias.fileio import write_json_atomic, write_text_atomic
from bgbias.installation import InstallationRecord
from bgbias.report.document import Block, Bullets, Code, Heading, Paragraph, Strong, Table, to_markdown
from bgbias.retrieval.metrics import METRICS, RetrievalScores
from bgbias.saliency.records import MASK_MAKER, MaskMaker, shown_mask_maker
from bgbias.schema import Record, check_record, field_problem, format_header, read_record

REPORT_FORMAT = "bgbias-eval-report"
HURT_MOST = 10
"""How many classes and images the Markdown report lists as hurt most by the background change."""
EMPTY_LISTED = 20
"""How many classes and images with empty masks the Markdown report names (the CSV files mark them all)."""

METRIC_TITLES = {"map_at_r": "MAP@R", "r_precision": "R-precision", "precision_at_1": "P@1"}
PER_CLASS_COLUMNS = ("label", "name", "images", "empty_masks", "clean_map_at_r", "corrupted_map_at_r", "drop",
                     "relative_drop")
_COMPUTED_KEYS = frozenset(
    {"format", "version", "images", "classes", "scored", "clean", "corrupted", "drop", "per_class",
     "images_hurt_most", "profile", "empty_masks"}
)
PROFILE_COLUMNS = ("set", "title", "repeats",
                   *(f"{which}_{name}" for name in METRICS for which in ("mean", "std")))

ReportKey = tuple[str, bool, str, str]
"""What identifies a run's evaluation in a comparison: (method, bgaugment, dataset, split)."""


class Scores(Record):
    """Each metric's mean over the scored queries (``None``: no query was scored)."""

    map_at_r: float | None
    r_precision: float | None
    precision_at_1: float | None


class RepeatScores(Scores):
    repeat: int


class CorruptedScores(Record):
    repeats: list[RepeatScores]
    mean: Scores
    std: Scores


class Drop(Record):
    absolute: float | None
    relative: float | None


class ClassDrop(Record):
    label: int | str
    name: str | None = None  # the class's name as the dataset gives it; reports made before names lack it
    images: int
    empty_masks: int | None = None  # its images whose mask shows no object; None: not checked
    clean_map_at_r: float | None
    corrupted_map_at_r: float | None
    drop: float | None
    relative_drop: float | None


class ImageDrop(Record):
    id: str
    label: int | str
    class_name: str | None = None
    empty_mask: bool | None = None
    clean_map_at_r: float
    corrupted_map_at_r: float
    drop: float


class WithoutEmptyMasks(Record):
    """The headline over the queries whose masks show an object: clean, corrupted (mean over repeats) and
    the drop, each metric as in the report's own."""

    scored: int
    clean: Scores
    corrupted: Scores
    drop: dict[str, Drop]


class EmptyMasks(Record):
    """The images whose saliency mask shows no object, by id in query order, and the headline without them
    (None where there are none)."""

    images: int
    ids: list[str]
    without: WithoutEmptyMasks | None = None


class ProfileSet(Record):
    set: str
    title: str
    repeats: int
    mean: Scores
    std: Scores


class Profile(Record):
    sets: list[ProfileSet]
    worst_k: int
    only_fg_fill: list[int]


class Checkpoint(Record):
    path: str
    epoch: int | None = None


class ShortlistRecall(Record):
    """How much of the exact top-R an approximate search's shortlist held, clean and per corrupted set."""

    recall_of_exact_top_r: float | None
    queries: int
    corrupted_recall_of_exact_top_r: float | None = None


class UsedMasks(Record):
    """The masks an evaluation's corrupted sets were cut out with, from its ``corrupted_sets``: the folder and
    what made them (``mask_maker``; not set in a report from before bgbias recorded it)."""

    masks: str
    mask_maker: MaskMaker | None = None

    def words(self) -> str:
        """What made the masks, as a page says it."""
        if MASK_MAKER not in self.model_fields_set:
            return "not recorded (an evaluation from before bgbias recorded it)"
        return shown_mask_maker(None if self.mask_maker is None else self.mask_maker.model_dump())


class EvaluationReport(Record):
    """``report.json`` as the tables, plots and pages read it (:mod:`bgbias.schema`); the model's description
    and the setup ride along unchecked (``model_extra``), since only ``report.md`` shows them, as text.
    Fields that reports of earlier versions lack are ``None`` (or empty)."""

    format: Literal["bgbias-eval-report"]
    version: int
    method: str
    bgaugment: bool | None = None  # a model bgbias neither trained nor described has no setting
    dataset: str
    measured: str | None = None  # reports made before "measured" existed lack it
    split: str
    run: str | None = None
    seed: int | None = None
    checkpoint: Checkpoint | str | None = None
    images: int
    classes: int
    scored: int
    clean: Scores
    corrupted: CorruptedScores | None = None
    drop: dict[str, Drop] | None = None
    per_class: list[ClassDrop] = Field(default_factory=list)
    images_hurt_most: list[ImageDrop] = Field(default_factory=list)
    profile: Profile | None = None
    empty_masks: EmptyMasks | None = None  # None: masks not checked (no corrupted sets, or none given)
    approximate: bool = False
    retrieval: str | None = None  # how the images were ranked; reports of precomputed embeddings lack it
    shortlist_recall: ShortlistRecall | None = None
    installation: InstallationRecord | None = None  # reports from before bgbias recorded it lack it
    split_reason: str | None = None  # which split was scored and why; reports from before it lack it

    @property
    def key(self) -> ReportKey:
        """What identifies the evaluation in a comparison: (method, bgaugment, measured dataset, split)."""
        measured = self.dataset if self.measured is None else self.measured
        return self.method, bool(self.bgaugment), measured, self.split

    @property
    def label(self) -> str:
        """How tables and plots name the run: ``"method"`` or ``"method + BGAugment"``."""
        return run_label(self.method, bool(self.bgaugment))

    @property
    def used_masks(self) -> UsedMasks | None:
        """The masks of the corrupted sets (``None`` for a clean-only evaluation); a ``corrupted_sets`` of
        another shape than bgbias writes is a ``RecordError``."""
        return check_record((self.model_extra or {}).get("corrupted_sets"), UsedMasks | None, path=None,
                            what="the evaluation report's corrupted_sets", fix="evaluate the run again")

    @property
    def setup(self) -> dict[str, Any]:
        """The evaluation's metadata as written (the model, the checkpoint, the sets, the installation):
        every field but the scores the report computes and the method, dataset and split its title names."""
        written = self.model_dump(exclude_unset=True)
        return {key: value for key, value in written.items()
                if key not in _COMPUTED_KEYS | {"method", "dataset", "split"}}


def summarize_evaluation(
    clean: RetrievalScores,
    corrupted: Sequence[RetrievalScores],
    labels: np.ndarray,
    ids: Sequence[str],
    meta: Mapping[str, Any],
    *,
    class_names: Mapping[Any, str] | None = None,
    empty_masks: Collection[str] | None = None,
) -> dict[str, Any]:
    """The report dict of one evaluation: ``meta`` passed through, the clean scores and, when there are
    corrupted repeats, each repeat's scores, their mean and std, the drop, the per-class drop of MAP@R
    (largest first) and the images whose MAP@R dropped most. ``labels`` and ``ids`` follow the query order;
    ``class_names`` names classes by label (a label without one is named by itself); ``empty_masks`` are the
    ids of the images whose saliency mask shows no object (None: not checked), flagged per class and image,
    the headline also given without them."""
    labels = np.asarray(labels)
    _check_inputs(clean, corrupted, labels, ids)
    clashes = sorted(_COMPUTED_KEYS & set(meta))
    if clashes:
        raise OptionError(f"the report metadata uses keys the report computes itself: {', '.join(clashes)}",
                          fix="rename those metadata entries")
    report: dict[str, Any] = {
        **format_header(REPORT_FORMAT),
        **meta,
        "images": len(labels),
        "classes": len(np.unique(labels)),
        "scored": clean.scored,
        "clean": metric_means(clean),
    }
    if not corrupted:
        return report
    repeats = [{"repeat": index, **metric_means(scores)} for index, scores in enumerate(corrupted)]
    mean = {name: _mean([row[name] for row in repeats]) for name in METRICS}
    std = {name: _sample_std([row[name] for row in repeats]) for name in METRICS}
    report["corrupted"] = {"repeats": repeats, "mean": mean, "std": std}
    report["drop"] = {name: _drop(report["clean"][name], mean[name]) for name in METRICS}
    names = {} if class_names is None else dict(class_names)
    empty = None if empty_masks is None else _flags(ids, empty_masks)
    report["per_class"] = _per_class(clean, corrupted, labels, names, empty)
    report["images_hurt_most"] = _images_hurt_most(clean, corrupted, labels, ids, names, empty)
    if empty is not None:
        report["empty_masks"] = _empty_masks(clean, corrupted, ids, empty)
    return report


def evaluation_record(report: Mapping[str, Any]) -> EvaluationReport:
    """The report dict of :func:`summarize_evaluation` (and the profile) as the typed record its renderers
    and callers read; a field of another type than the report declares is a ``RecordError`` naming it."""
    return check_record(report, EvaluationReport, path=None, what="the evaluation report",
                        fix="pass the metadata each field of the report declares")


def metadata_problem(meta: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """``(field, what it must be, what it holds)`` of the first metadata entry whose value is not of the type
    the report declares for its key (``seed``: an integer), or ``None``; keys the report does not declare are
    anything, keys it computes are refused by :func:`summarize_evaluation`."""
    for key, value in meta.items():
        field = EvaluationReport.model_fields.get(key)
        if field is None or key in _COMPUTED_KEYS:
            continue
        problem = field_problem(value, field.annotation)
        if problem is not None:
            where, wanted, found = problem
            inside = "" if not where else where if where.startswith("[") else f".{where}"
            return f"{key}{inside}", wanted, found
    return None


def write_evaluation_report(
    report: Mapping[str, Any],
    out_dir: str | os.PathLike[str],
    *,
    clean: RetrievalScores,
    corrupted: Sequence[RetrievalScores],
    labels: np.ndarray,
    ids: Sequence[str],
) -> dict[str, Path]:
    """Write ``report.json`` (the dict ``report``, as it is), ``report.csv``, ``per_query.csv``, ``report.md``
    and, when the report has corrupted repeats, ``per_class.csv``, and a background-reliance profile,
    ``profile.csv`` (those from its typed record), into ``out_dir``, each atomically; return their paths keyed
    by file name with ``_`` for ``.`` (``report_json``, ``report_csv``, ``per_query_csv``, ``report_md``,
    ``per_class_csv``, ``profile_csv``)."""
    labels = np.asarray(labels)
    _check_inputs(clean, corrupted, labels, ids)
    record = evaluation_record(report)
    repeats = len(record.corrupted.repeats) if record.corrupted else 0
    if len(labels) != record.images or len(corrupted) != repeats:
        raise OptionError(
            f"the scores ({len(labels)} images, {len(corrupted)} repeats) are not the ones the report was "
            f"made from ({record.images} images, {repeats} repeats)",
            fix="pass the same scores to summarize_evaluation and write_evaluation_report",
        )
    out = Path(out_dir)
    paths = {
        "report_json": out / "report.json",
        "report_csv": out / "report.csv",
        "per_query_csv": out / "per_query.csv",
        "report_md": out / "report.md",
    }
    write_json_atomic(paths["report_json"], report)
    write_text_atomic(paths["report_csv"], csv_text(("set", *METRICS), _set_rows(record)))
    empty = None if record.empty_masks is None else record.empty_masks.ids
    write_text_atomic(paths["per_query_csv"], _per_query_csv(clean, corrupted, labels, ids, empty))
    write_text_atomic(paths["report_md"], format_evaluation_markdown(record))
    if record.corrupted:
        paths["per_class_csv"] = out / "per_class.csv"
        rows = ([getattr(row, key) for key in PER_CLASS_COLUMNS] for row in record.per_class)
        write_text_atomic(paths["per_class_csv"], csv_text(PER_CLASS_COLUMNS, rows))
    if record.profile is not None:
        paths["profile_csv"] = out / "profile.csv"
        rows = ([row.set, row.title, row.repeats,
                 *(getattr(getattr(row, which), metric) for metric in METRICS for which in ("mean", "std"))]
                for row in record.profile.sets)
        write_text_atomic(paths["profile_csv"], csv_text(PROFILE_COLUMNS, rows))
    return paths


def load_evaluation_report(path: str | os.PathLike[str]) -> EvaluationReport:
    """A ``report.json`` written by :func:`write_evaluation_report`, checked to be one, of this version, with
    every field the tables read of the type it is written with (:class:`EvaluationReport`)."""
    path = Path(path)
    if not path.is_file():
        raise OptionError("there is no evaluation report here", path=path,
                          fix="evaluate the run first with `bgbias eval`")
    return read_record(path, EvaluationReport, what="the evaluation report", file_format=REPORT_FORMAT,
                       fix="re-run `bgbias eval` (a report is never edited by hand)")


def run_label(method: str, bgaugment: bool) -> str:
    """How tables and plots name a run: ``"method"`` or ``"method + BGAugment"``."""
    return f"{method} + BGAugment" if bgaugment else method


def index_reports(reports: Iterable[EvaluationReport]) -> dict[ReportKey, EvaluationReport]:
    """Reports by :attr:`EvaluationReport.key`, in input order; two reports of the same key are an error
    naming both."""
    index: dict[ReportKey, EvaluationReport] = {}
    for report in reports:
        key = report.key
        if key in index:
            method, bgaugment, dataset, split = key
            raise OptionError(
                f"two evaluations of {run_label(method, bgaugment)} on {dataset} ({split} split): "
                f"runs {index[key].run or '?'} and {report.run or '?'}",
                fix="pass one run per method, BGAugment setting, dataset and split",
            )
        index[key] = report
    return index


def format_evaluation_markdown(report: EvaluationReport) -> str:
    """The report as Markdown: a titled table of clean vs corrupted scores in %, the setup, the hurt most."""
    return to_markdown(evaluation_blocks(report), Path())


def evaluation_blocks(report: EvaluationReport) -> list[Block]:
    """The blocks of ``report.md``: the headline, the classes and images, the profile, the setup last; every
    name in them (a class, an image, a folder, the model) is text."""
    blocks: list[Block] = [Heading(_title(report), 1), *headline_blocks(report), *_per_class_blocks(report)]
    if report.profile is not None:
        blocks += _profile_blocks(report.profile)
    setup = report.setup
    blocks += [Heading("Setup"),
               Bullets(tuple(item for key in sorted(setup) for item in _setup_items(key, setup[key])))]
    return blocks


def headline_blocks(report: EvaluationReport) -> list[Block]:
    """What was measured and what it came to: clean vs corrupted scores in %, what was scored, and the
    images whose masks show no object with the headline without them."""
    blocks: list[Block] = [
        Table(*_scores_table(report.clean, report.corrupted, report.drop)),
        Paragraph(f"{report.images} images in {report.classes} classes; {report.scored} scored "
                  "(queries alone in their class have nothing to retrieve and are left out)."),
        *([Paragraph(f"Split scored: {report.split_reason}.")] if report.split_reason else []),
    ]
    return blocks + _empty_mask_headline(report)


def _scores_table(clean: Scores, corrupted: CorruptedScores | Scores | None,
                  drop: Mapping[str, Drop] | None) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """Clean (and corrupted, with the drop) per metric in %; ``corrupted`` with repeats shows their spread."""
    if corrupted is None or drop is None:
        return ("metric", "clean (%)"), tuple((METRIC_TITLES[name], percent(getattr(clean, name)))
                                              for name in METRICS)
    if isinstance(corrupted, CorruptedScores):
        repeats = len(corrupted.repeats)
        spread = "mean ± std" if repeats > 1 else "mean"
        column = f"corrupted (%, {spread} over {repeats} repeat{'s' * (repeats > 1)})"
        cells = [percent_spread(getattr(corrupted.mean, name), getattr(corrupted.std, name))
                 for name in METRICS]
    else:
        column = "corrupted (%, mean over the repeats)"
        cells = [percent(getattr(corrupted, name)) for name in METRICS]
    headers = ("metric", "clean (%)", column, "drop (points)", "relative drop (%)")
    return headers, tuple((METRIC_TITLES[name], percent(getattr(clean, name)), cell,
                           percent(drop[name].absolute), percent(drop[name].relative))
                          for name, cell in zip(METRICS, cells, strict=True))


def _empty_mask_headline(report: EvaluationReport) -> list[Block]:
    """How many images have masks that show no object, how they were counted, and the headline without
    them; a sentence saying the masks were not checked where a corrupted score could not check them."""
    empty = report.empty_masks
    if report.corrupted is None:
        return []
    if empty is None:
        return [Paragraph("Empty saliency masks: not checked (the corrupted scores came without their "
                          "masks), so images whose corrupted copy is background alone cannot be flagged.")]
    if not empty.images:
        return [Paragraph("Empty saliency masks: none; every image's mask shows an object.")]
    classes = [row for row in report.per_class if row.empty_masks]
    whole = sum(1 for row in classes if row.empty_masks == row.images)
    blocks: list[Block] = [Paragraph((
        Strong(f"{empty.images} of {report.images} images have a saliency mask that shows no object"),
        f" ({len(classes)} classes, {whole} of them entirely): their corrupted copy is the new background "
        "alone, so their drop says nothing about background reliance. They are scored as every image is, "
        "in the table above; below, the same scores without them as queries (they stay in the gallery, so "
        "no other query's ranking changes). An empty mask is one ", Code("bgbias masks"), " flagged (the "
        "network's raw output stayed below ", Code("--empty-below"), ") or, without that flag, one with no "
        "pixel at half strength."))]
    if empty.without is not None:
        without = empty.without
        blocks += [Table(*_scores_table(without.clean, without.corrupted, without.drop),
                         caption=f"without the images whose masks are empty: {without.scored} scored "
                                 "queries")]
    return blocks


def _per_class_blocks(report: EvaluationReport) -> list[Block]:
    """The classes and images hurt most, then those whose masks show no object."""
    flagged = bool(report.empty_masks and report.empty_masks.images)
    blocks: list[Block] = []
    if report.per_class:
        hurt_classes = [row for row in report.per_class if row.drop is not None][:HURT_MOST]
        blocks += [Heading(f"The {len(hurt_classes)} classes hurt most (MAP@R, %)"),
                   _class_table(hurt_classes, flagged)]
    if report.images_hurt_most:
        hurt_images = report.images_hurt_most
        headers = ("image", "class", *(("empty mask",) if flagged else ()), "clean", "corrupted",
                   "drop (points)")
        blocks += [Heading(f"The {len(hurt_images)} images hurt most (MAP@R, %)"), Table(headers, tuple(
            (row.id, shown_class(row.class_name, row.label), *((_yes(row.empty_mask),) if flagged else ()),
             percent(row.clean_map_at_r), percent(row.corrupted_map_at_r), percent(row.drop))
            for row in hurt_images))]
    if flagged:
        blocks += _empty_mask_blocks(report)
    return blocks


def _class_table(rows: Sequence[ClassDrop], flagged: bool) -> Table:
    headers = ("class", "images", *(("empty masks",) if flagged else ()), "clean", "corrupted",
               "drop (points)", "relative drop (%)")
    return Table(headers, tuple(
        (shown_class(row.name, row.label), str(row.images),
         *((str(row.empty_masks or 0),) if flagged else ()),
         percent(row.clean_map_at_r), percent(row.corrupted_map_at_r), percent(row.drop),
         percent(row.relative_drop)) for row in rows))


def _empty_mask_blocks(report: EvaluationReport) -> list[Block]:
    """The classes with empty masks (most first) and the first images, each list pointing at the CSV file
    that marks them all."""
    empty = report.empty_masks
    assert empty is not None
    classes = sorted((row for row in report.per_class if row.empty_masks),
                     key=lambda row: (-(row.empty_masks or 0) / row.images, -(row.empty_masks or 0)))
    more_classes = (f" The first {EMPTY_LISTED} of {len(classes)}; per_class.csv's empty_masks column counts "
                    "them all." if len(classes) > EMPTY_LISTED else "")
    more_images = (f", the first {EMPTY_LISTED} of {empty.images}; per_query.csv's empty_mask column marks "
                   "them all" if empty.images > EMPTY_LISTED else "")
    return [
        Heading("Classes with empty masks (MAP@R, %)"),
        Paragraph("Classes with images whose saliency mask shows no object, those with most such images "
                  "first: a class whose masks are all empty has a corrupted score of backgrounds only."
                  + more_classes),
        _class_table(classes[:EMPTY_LISTED], True),
        Heading("Images with empty masks"),
        Paragraph(f"In query order{more_images}."),
        Bullets(tuple((Code(image_id),) for image_id in empty.ids[:EMPTY_LISTED])),
    ]


def _yes(flag: bool | None) -> str:
    return "" if flag is None else "yes" if flag else "no"


def _profile_blocks(profile: Profile) -> list[Block]:
    """The background-reliance profile as a titled table (%, mean ± std over its sets) and notes."""
    rows = tuple((row.title, str(row.repeats),
                  *(percent_spread(getattr(row.mean, name), getattr(row.std, name)) for name in METRICS))
                 for row in profile.sets)
    fill = ", ".join(str(value) for value in profile.only_fg_fill)
    return [
        Heading("Background-reliance profile (%)"),
        Table(("set", "sets", *(METRIC_TITLES[name] for name in METRICS)), rows),
        Paragraph(
            f"only-fg: the object on RGB ({fill}). only-bg: the object removed, the hole filled by tiling "
            "the image's own background (or black); inpainted: the object removed with its mask dilated by 2 "
            "% of the crop's side, the hole painted in from around it (OpenCV's Telea inpainting). "
            "mixed-same / mixed-rand: the object on the tiled "
            "background of another image of its class / of another class. Worst case: per query the lowest "
            f"score over {profile.worst_k} random backgrounds, queries against the clean gallery; it "
            f"costs {profile.worst_k} embeddings of every image. Chance: a random ranking."),
    ]


def _check_inputs(
    clean: RetrievalScores, corrupted: Sequence[RetrievalScores], labels: np.ndarray, ids: Sequence[str]
) -> None:
    """Every score set must describe the same queries: as many as labels and ids, with the same R each."""
    if labels.ndim != 1 or len(ids) != len(labels):
        raise OptionError(f"expected one label and one id per image, got labels of shape {labels.shape} "
                          f"and {len(ids)} ids", fix="pass a 1-D label array and an id list of equal length")
    for name, scores in [("clean", clean)] + [(f"repeat {i}", s) for i, s in enumerate(corrupted)]:
        r = scores.per_query["r"]
        if len(r) != len(labels) or not np.array_equal(r, clean.per_query["r"]):
            raise OptionError(
                f"the {name} scores cover {len(r)} queries with other class sizes than the clean scores of "
                f"{len(labels)} images",
                fix="score the clean split and every corrupted repeat on the same images, in the same order",
            )


def metric_means(scores: RetrievalScores) -> dict[str, float | None]:
    """Each metric's mean over the scored queries, None where no query was scored (the report's cells)."""
    return {name: finite_or_none(getattr(scores, name)) for name in METRICS}


def finite_or_none(value: float | None) -> float | None:
    """A score as a report keeps it: a float, or None where it is missing or NaN."""
    return None if value is None or math.isnan(value) else float(value)


def _mean(values: Sequence[float | None]) -> float | None:
    return None if not values or None in values else float(np.mean(values))


def _sample_std(values: Sequence[float | None]) -> float | None:
    return None if len(values) < 2 or None in values else float(np.std(values, ddof=1))


def _drop(clean: float | None, corrupted: float | None) -> dict[str, float | None]:
    absolute = None if clean is None or corrupted is None else clean - corrupted
    relative = None if absolute is None or clean == 0 else absolute / clean
    return {"absolute": absolute, "relative": relative}


def _per_class(
    clean: RetrievalScores, corrupted: Sequence[RetrievalScores], labels: np.ndarray,
    names: Mapping[Any, str], empty: np.ndarray | None,
) -> list[dict[str, Any]]:
    """MAP@R per class, clean and corrupted (the mean over repeats of the class's mean), largest drop first,
    with the class's name and how many of its images have empty masks; a class of one image has no score and
    goes last."""
    rows = []
    scored = ~np.isnan(clean.per_query["map_at_r"])
    for label in np.unique(labels):
        members = (labels == label) & scored
        clean_value = _class_mean(clean, members)
        corrupted_value = _mean([_class_mean(scores, members) for scores in corrupted])
        drop = _drop(clean_value, corrupted_value)
        rows.append({"label": label.item(), "name": _class_name(names, label.item()),
                     "images": int((labels == label).sum()),
                     "empty_masks": None if empty is None else int(empty[labels == label].sum()),
                     "clean_map_at_r": clean_value, "corrupted_map_at_r": corrupted_value,
                     "drop": drop["absolute"], "relative_drop": drop["relative"]})
    return sorted(rows, key=lambda row: (row["drop"] is None, -(row["drop"] or 0.0)))


def _flags(ids: Sequence[str], flagged: Collection[str]) -> np.ndarray:
    """Per image, whether its id is among ``flagged``."""
    flagged = set(flagged)
    return np.array([str(image_id) in flagged for image_id in ids], dtype=bool)


def _class_name(names: Mapping[Any, str], label: Any) -> str:
    return names.get(label, str(label))


def _empty_masks(
    clean: RetrievalScores, corrupted: Sequence[RetrievalScores], ids: Sequence[str], empty: np.ndarray
) -> dict[str, Any]:
    """The images with empty masks by id, and the headline over the other queries (None without any)."""
    flagged = [str(ids[i]) for i in np.flatnonzero(empty)]
    if not flagged:
        return {"images": 0, "ids": [], "without": None}
    kept = ~empty
    clean_means = _subset_means(clean, kept)
    repeats = [_subset_means(scores, kept) for scores in corrupted]
    mean = {name: _mean([row[name] for row in repeats]) for name in METRICS}
    return {"images": len(flagged), "ids": flagged, "without": {
        "scored": int((kept & ~np.isnan(clean.per_query["map_at_r"])).sum()),
        "clean": clean_means, "corrupted": mean,
        "drop": {name: _drop(clean_means[name], mean[name]) for name in METRICS}}}


def _subset_means(scores: RetrievalScores, kept: np.ndarray) -> dict[str, float | None]:
    """Each metric's mean over the scored queries among ``kept``, None where none is scored."""
    means = {}
    for name in METRICS:
        values = scores.per_query[name][kept]
        values = values[~np.isnan(values)]
        means[name] = float(values.mean()) if len(values) else None
    return means


def _class_mean(scores: RetrievalScores, members: np.ndarray) -> float | None:
    return float(scores.per_query["map_at_r"][members].mean()) if members.any() else None


def _images_hurt_most(
    clean: RetrievalScores, corrupted: Sequence[RetrievalScores], labels: np.ndarray, ids: Sequence[str],
    names: Mapping[Any, str], empty: np.ndarray | None,
) -> list[dict[str, Any]]:
    """The scored images whose MAP@R fell most (mean over repeats), largest drop first, ties in order."""
    before = clean.per_query["map_at_r"]
    after = np.mean([scores.per_query["map_at_r"] for scores in corrupted], axis=0)
    drop = before - after
    scored = np.flatnonzero(~np.isnan(drop))
    order = scored[np.argsort(-drop[scored], kind="stable")][:HURT_MOST]
    return [{"id": str(ids[i]), "label": labels[i].item(), "class_name": _class_name(names, labels[i].item()),
             "empty_mask": None if empty is None else bool(empty[i]), "clean_map_at_r": float(before[i]),
             "corrupted_map_at_r": float(after[i]), "drop": float(drop[i])} for i in order]


def _set_rows(report: EvaluationReport) -> list[list[Any]]:
    """report.csv: the clean set, every repeat, then the repeats' mean and std."""
    rows = [["clean", *_metric_values(report.clean)]]
    corrupted = report.corrupted
    if corrupted:
        rows += [[f"repeat-{row.repeat}", *_metric_values(row)] for row in corrupted.repeats]
        rows += [["mean", *_metric_values(corrupted.mean)], ["std", *_metric_values(corrupted.std)]]
    return rows


def _metric_values(scores: Scores) -> list[float | None]:
    return [getattr(scores, name) for name in METRICS]


def per_query_table(
    clean: RetrievalScores, corrupted: Sequence[RetrievalScores], labels: np.ndarray, ids: Sequence[str],
    empty_masks: Collection[str] | None = None,
) -> dict[str, list[Any]]:
    """The per-query table by column: id, label, R, with ``empty_masks`` (the ids of images whose mask shows
    no object) whether the image's is empty, then each metric for the clean set and each repeat
    (``clean_map_at_r``, ``repeat0_map_at_r``, …); a lone query's scores are None. ``per_query.csv`` holds
    it, and ``pandas.DataFrame(table)`` reads it."""
    sets = [("clean", clean), *((f"repeat{i}", scores) for i, scores in enumerate(corrupted))]
    table: dict[str, list[Any]] = {"id": list(ids), "label": labels.tolist(),
                                   "r": clean.per_query["r"].astype(int).tolist()}
    if empty_masks is not None:
        table["empty_mask"] = _flags(ids, empty_masks).tolist()
    for prefix, scores in sets:
        for name in METRICS:
            table[f"{prefix}_{name}"] = [finite_or_none(float(value)) for value in scores.per_query[name]]
    return table


def _per_query_csv(
    clean: RetrievalScores, corrupted: Sequence[RetrievalScores], labels: np.ndarray, ids: Sequence[str],
    empty_masks: Collection[str] | None,
) -> str:
    table = per_query_table(clean, corrupted, labels, ids, empty_masks)
    return csv_text(list(table), zip(*table.values(), strict=True))


def csv_text(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """CSV text with ``\\n`` line ends; None becomes an empty cell, floats keep full precision."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(headers)
    writer.writerows(["" if value is None else value for value in row] for row in rows)
    return buffer.getvalue()


def _title(report: EvaluationReport) -> str:
    title = f"{report.label} on {report.dataset}, {report.split} split"
    checkpoint = report.checkpoint
    if isinstance(checkpoint, Checkpoint):
        epoch = "" if checkpoint.epoch is None else f" (epoch {checkpoint.epoch})"
        title = f"{title}, checkpoint {Path(checkpoint.path).name}{epoch}"
    elif checkpoint is not None:
        title = f"{title}, checkpoint {checkpoint}"
    return title + approximate_note(report)


def approximate_note(report: EvaluationReport) -> str:
    """`` (APPROXIMATE: …)`` for a report of an approximate search, with the measured recall of the exact
    ranking where there is one; empty for an exact search."""
    if not report.approximate:
        return ""
    recall = report.shortlist_recall
    value = None if recall is None else recall.recall_of_exact_top_r
    measured = ("" if recall is None or value is None else
                f", recall of the exact top-R {value:.3f} over {recall.queries} clean queries"
                + ("" if recall.corrupted_recall_of_exact_top_r is None else
                   f", {recall.corrupted_recall_of_exact_top_r:.3f} over as many per corrupted set"))
    retrieval = "shortlist" if report.retrieval is None else report.retrieval
    return f" (APPROXIMATE: {retrieval}{measured})"


def _setup_items(key: str, value: Any) -> tuple[str | Bullets, ...]:
    """A metadata entry as list items: a mapping nests its entries in a list under the key, a list of
    mappings gets one nested item per mapping, anything else stays on the key's line; what made the masks
    in words."""
    if key == MASK_MAKER and (value is None or isinstance(value, Mapping)):
        return (f"{key}: {shown_mask_maker(value)}",)
    if isinstance(value, Mapping) and value:
        return f"{key}:", Bullets(tuple(item for k in sorted(value) for item in _setup_items(k, value[k])))
    if isinstance(value, list | tuple) and value and all(isinstance(item, Mapping) for item in value):
        return f"{key}:", Bullets(tuple(_describe(item) for item in value))
    return (f"{key}: {_describe(value)}",)


def _describe(value: Any) -> str:
    """A metadata value on one line: mappings as ``key value`` pairs, sequences comma-separated."""
    if isinstance(value, Mapping):
        return ", ".join(f"{key} {_describe(item)}" for key, item in sorted(value.items()))
    if isinstance(value, list | tuple):
        return ", ".join(_describe(item) for item in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def percent(value: float | None) -> str:
    """A fraction in % with 2 decimals, as the paper prints MAP@R; an empty cell where there is no value."""
    return "" if value is None else f"{100 * value:.2f}"


def percent_spread(mean: float | None, std: float | None) -> str:
    """``mean ± std`` in %, or the mean alone where there is no std (one repeat)."""
    return percent(mean) if std is None or mean is None else f"{percent(mean)} ± {percent(std)}"
