"""The evaluation report's files and text: ``report.json`` (the record's own dump, what was set and nothing
added, so it reads back to an equal record), the CSV tables and ``report.md`` of one evaluation, written from
its typed record, and the record read back from ``report.json``.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bgbias.data.items import shown_class
from bgbias.errors import OptionError
from bgbias.fileio import write_json_atomic, write_text_atomic
from bgbias.measurement.intervals import Interval, IntervalSettings
from bgbias.measurement.record import (
    REPORT_FORMAT,
    Checkpoint,
    ClassDrop,
    Confidence,
    CorruptedScores,
    Drop,
    EvaluationReport,
    MaskSensitivity,
    Profile,
    ReportKey,
    Scores,
    run_label,
)
from bgbias.measurement.summary import HURT_MOST, check_scores, per_query_table
from bgbias.report.differences import p_cell, shown_p_value, signed_points
from bgbias.report.document import Block, Bullets, Code, Heading, Paragraph, Strong, Table, to_markdown
from bgbias.report.paste_control import decomposition_blocks
from bgbias.retrieval.metrics import METRICS, RetrievalScores
from bgbias.saliency.records import MASK_MAKER, shown_mask_maker
from bgbias.schema import read_record

EMPTY_LISTED = 20
"""How many classes and images with empty masks the Markdown report names (the CSV files mark them all)."""

METRIC_TITLES = {"map_at_r": "MAP@R", "r_precision": "R-precision", "precision_at_1": "P@1"}
PER_CLASS_COLUMNS = ("label", "name", "images", "empty_masks", "clean_map_at_r", "corrupted_map_at_r", "drop",
                     "relative_drop")
PROFILE_COLUMNS = ("set", "title", "repeats",
                   *(f"{which}_{name}" for name in METRICS for which in ("mean", "std")))

def write_evaluation_report(
    record: EvaluationReport,
    out_dir: str | os.PathLike[str],
    *,
    clean: RetrievalScores,
    corrupted: Sequence[RetrievalScores],
    labels: np.ndarray,
    ids: Sequence[str],
    variants: Mapping[str, Sequence[RetrievalScores]] | None = None,
) -> dict[str, Path]:
    """Write ``report.json`` (the typed ``record`` as it was made), ``report.csv``, ``per_query.csv`` (from
    the scores it was made from, the profile's ``variants`` among them), ``report.md``, and ``per_class.csv``
    and ``profile.csv`` where the report has them, into ``out_dir``, each atomically; return their paths keyed
    by file name with ``_`` for ``.``.
    """
    labels = np.asarray(labels)
    check_scores(clean, corrupted, labels, ids)
    _check_variants(record, clean, variants or {})
    repeats = len(record.corrupted.repeats) if record.corrupted else 0
    if len(labels) != record.images or len(corrupted) != repeats:
        raise OptionError(
            f"the scores ({len(labels)} images, {len(corrupted)} repeats) are not the ones the report was "
            f"made from ({record.images} images, {repeats} repeats)",
            fix="pass the same scores to summarize_evaluation and write_evaluation_report",
        )
    empty = None if record.empty_masks is None else record.empty_masks.ids
    table = per_query_table(clean, corrupted, labels, ids, empty, variants)
    texts = {"report.csv": csv_text(("set", *METRICS), _set_rows(record)),
             "per_query.csv": csv_text(list(table), zip(*table.values(), strict=True)),
             "report.md": format_evaluation_markdown(record)}
    if record.corrupted:
        texts["per_class.csv"] = csv_text(PER_CLASS_COLUMNS, ([getattr(row, key) for key in PER_CLASS_COLUMNS]
                                                              for row in record.per_class))
    if record.profile is not None:
        texts["profile.csv"] = csv_text(PROFILE_COLUMNS, (
            [row.set, row.title, row.repeats,
             *(getattr(getattr(row, which), metric) for metric in METRICS for which in ("mean", "std"))]
            for row in record.profile.sets))
    paths = {"report_json": Path(out_dir) / "report.json"}
    write_json_atomic(paths["report_json"], record.model_dump(exclude_unset=True))
    for name, text in texts.items():
        path = paths[name.replace(".", "_")] = Path(out_dir) / name
        write_text_atomic(path, text)
    return paths


def _check_variants(record: EvaluationReport, clean: RetrievalScores,
                    variants: Mapping[str, Sequence[RetrievalScores]]) -> None:
    """The variants' scores must be those of the report's profile: as many draws as its row of each, over the
    queries of the clean scores."""
    rows = {row.set: row.repeats for row in record.profile.sets} if record.profile is not None else {}
    for name, scores in variants.items():
        if rows.get(name) != len(scores) or any(
                not np.array_equal(draw.per_query["r"], clean.per_query["r"]) for draw in scores):
            raise OptionError(f"the {name} scores ({len(scores)} draws) are not those of the report's "
                              f"profile ({rows.get(name, 'no such set')})",
                              fix="pass the variants' scores the report's profile was made from")


def load_evaluation_report(path: str | os.PathLike[str]) -> EvaluationReport:
    """A ``report.json`` written by :func:`write_evaluation_report`, checked to be one, of this version, with
    every field the tables read of the type it is written with (:class:`EvaluationReport`)."""
    path = Path(path)
    if not path.is_file():
        raise OptionError("there is no evaluation report here", path=path,
                          fix="evaluate the run first with `bgbias eval`")
    return read_record(path, EvaluationReport, what="the evaluation report", file_format=REPORT_FORMAT,
                       fix="re-run `bgbias eval` (a report is never edited by hand)")


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
    if report.mask_sensitivity is not None and report.corrupted is not None:
        blocks += mask_sensitivity_blocks(report.mask_sensitivity, report.corrupted)
    setup = report.setup
    blocks += [Heading("Setup"),
               Bullets(tuple(item for key in sorted(setup) for item in _setup_items(key, setup[key])))]
    return blocks


def headline_blocks(report: EvaluationReport) -> list[Block]:
    """What was measured and what it came to: clean vs corrupted scores in %, what was scored, and the
    images whose masks show no object with the headline without them."""
    blocks: list[Block] = [
        Table(*_scores_table(report.clean, report.corrupted, report.drop, report.confidence)),
        *([Paragraph(intervals_sentence(report.intervals))] if report.intervals is not None else []),
        Paragraph(f"{report.images} images in {report.classes} classes; {report.scored} scored "
                  "(queries alone in their class have nothing to retrieve and are left out)."),
        *([Paragraph(f"Split scored: {report.split_reason}.")] if report.split_reason else []),
    ]
    return blocks + _empty_mask_headline(report)


def _scores_table(
    clean: Scores, corrupted: CorruptedScores | Scores | None, drop: Mapping[str, Drop] | None,
    confidence: Confidence | None = None,
) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """Clean (and corrupted, with the drop) per metric in %; ``corrupted`` with repeats shows their spread,
    and with ``confidence`` each number its interval in brackets and the drop its p-value."""
    known = confidence or Confidence(clean={})
    clean_cells = [with_interval(percent(getattr(clean, name)), known.clean.get(name)) for name in METRICS]
    if corrupted is None or drop is None:
        return ("metric", "clean (%)"), tuple((METRIC_TITLES[name], cell)
                                              for name, cell in zip(METRICS, clean_cells, strict=True))
    if isinstance(corrupted, CorruptedScores):
        repeats = len(corrupted.repeats)
        spread = "mean ± std" if repeats > 1 else "mean"
        column = f"corrupted (%, {spread} over {repeats} repeat{'s' * (repeats > 1)})"
        cells = [with_interval(percent_spread(getattr(corrupted.mean, name), getattr(corrupted.std, name)),
                               (known.corrupted or {}).get(name)) for name in METRICS]
    else:
        column = "corrupted (%, mean over the repeats)"
        cells = [percent(getattr(corrupted, name)) for name in METRICS]
    drops = known.drop or {}
    headers = ("metric", "clean (%)", column, "drop (points)", "relative drop (%)")
    rows = []
    for name, clean_cell, cell in zip(METRICS, clean_cells, cells, strict=True):
        paired = drops.get(name)
        row = (METRIC_TITLES[name], clean_cell, cell,
               with_interval(percent(drop[name].absolute), None if paired is None else paired.difference),
               percent(drop[name].relative))
        rows.append((*row, shown_p_value(None if paired is None else paired.p_value)) if drops else row)
    return (*headers, "p") if drops else headers, tuple(rows)


def with_interval(cell: str, interval: Interval | None) -> str:
    """A cell in % followed by its interval in brackets (``57.30 [55.12, 59.41]``); the cell alone where it
    is empty or has none."""
    if interval is None or not cell:
        return cell
    return f"{cell} [{percent(interval.low)}, {percent(interval.high)}]"


def intervals_sentence(settings: IntervalSettings) -> str:
    """What the brackets are over, under a table of them."""
    return (f"In brackets: {100 * settings.level:g} % intervals over the queries and the background draws "
            f"({settings.resamples:,} bootstrap resamples), not over training seeds; p: the paired drop's "
            "p-value of no drop (docs/evaluation.md, How sure is a number).")


def _empty_mask_headline(report: EvaluationReport) -> list[Block]:
    """The images whose masks show no object and the headline without them, or that the masks were not
    checked."""
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
            (row.id, shown_class(row.class_name, row.label),
             *(({None: "", True: "yes", False: "no"}[row.empty_mask],) if flagged else ()),
             percent(row.clean_map_at_r), percent(row.corrupted_map_at_r), percent(row.drop))
            for row in hurt_images))]
    if flagged:
        blocks += _empty_mask_blocks(report)
    return blocks


def _class_table(rows: Sequence[ClassDrop], flagged: bool) -> Table:
    """Classes' MAP@R, clean and corrupted, and the drop with its interval over the class's queries where
    the report gives one (the classes hurt most)."""
    drop = "drop (points, interval)" if any(row.drop_interval for row in rows) else "drop (points)"
    headers = ("class", "images", *(("empty masks",) if flagged else ()), "clean", "corrupted", drop,
               "relative drop (%)")
    return Table(headers, tuple(
        (shown_class(row.name, row.label), str(row.images),
         *((str(row.empty_masks or 0),) if flagged else ()),
         percent(row.clean_map_at_r), percent(row.corrupted_map_at_r),
         with_interval(percent(row.drop), row.drop_interval), percent(row.relative_drop)) for row in rows))


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


def _profile_blocks(profile: Profile) -> list[Block]:
    """The background-reliance profile as a titled table (%, mean ± std over its sets, and the interval over
    the queries and those sets) and notes."""
    rows = tuple((row.title, str(row.repeats),
                  *(with_interval(percent_spread(getattr(row.mean, name), getattr(row.std, name)),
                                  (row.interval or {}).get(name)) for name in METRICS))
                 for row in profile.sets)
    gap = next((row for row in profile.sets if row.set == "bg-gap" and row.p_value), None)
    gap_p = ("" if gap is None or gap.p_value is None else " The BG-gap's p-value of no gap (paired by query "
             "and draw): " + ", ".join(f"{METRIC_TITLES[name]} {shown_p_value(gap.p_value.get(name))}"
                                       for name in METRICS) + ".")
    fill = ", ".join(str(value) for value in profile.only_fg_fill)
    return [
        Heading("Background-reliance profile (%)"),
        Table(("set", "sets", *(METRIC_TITLES[name] for name in METRICS)), rows),
        Paragraph(
            "Each cell: the mean ± std over the row's sets (the spread over background draws alone), then in "
            "brackets the interval over the queries and those sets." + gap_p),
        Paragraph(
            f"only-fg: the object on RGB ({fill}). only-bg: the object removed, the hole filled by tiling "
            "the image's own background (or black); inpainted: the object removed with its mask dilated by 2 "
            "% of the crop's side, the hole painted in from around it (OpenCV's Telea inpainting). "
            "mixed-same / mixed-rand: the object on the tiled "
            "background of another image of its class / of another class. Worst case: per query the lowest "
            f"score over {profile.worst_k} random backgrounds, queries against the clean gallery; it "
            f"costs {profile.worst_k} embeddings of every image. Chance: a random ranking."),
        *decomposition_blocks(profile),
    ]


def mask_sensitivity_blocks(sensitivity: MaskSensitivity, corrupted: CorruptedScores) -> list[Block]:
    """How much the masks decide: the corrupted MAP@R with each source (``corrupted``: the first's), the
    paired difference with its interval and p-value, and how far the masks agree, with how to read it."""
    rows = tuple((f"{which}: {used.masks}; {used.words()}", percent_spread(scores.mean.map_at_r,
                                                                          scores.std.map_at_r))
                 for which, used, scores in (("first", sensitivity.first, corrupted),
                                             ("second", sensitivity.second, sensitivity.corrupted)))
    paired, agreement = sensitivity.difference["map_at_r"], sensitivity.agreement
    difference = "no query was scored by both"
    if paired is not None:
        difference = (f"{signed_points(paired)} points ({100 * paired.difference.level:g} % interval), p "
                      f"{p_cell(paired)}, {paired.queries} queries, paired by query and by background draw")
    worst = ", ".join(f"{image.id} {image.iou:.2f}" for image in agreement.worst_images)
    return [
        Heading("How much do the masks decide"),
        Table(("masks the corrupted repeats were cut out with", "corrupted MAP@R (%)"), rows),
        Paragraph(f"Second − first, MAP@R: {difference}. The masks agree with IoU {agreement.mean:.3f} on "
                  f"average (median {agreement.median:.3f}, worst {agreement.worst:.3f}) over "
                  f"{agreement.images} images at the evaluation crop; least: {worst}."),
        Paragraph("How to read it: an interval that holds 0 says these two mask sources give the same "
                  "corrupted score up to the chance of the queries and backgrounds, so the drop is not the "
                  "mask model's; one that excludes 0 says that much of the corrupted score depends on which "
                  "masks cut the objects out."),
    ]


def _set_rows(report: EvaluationReport) -> list[list[Any]]:
    """report.csv: the clean set, every repeat, then the repeats' mean and std."""
    sets: list[tuple[str, Scores]] = [("clean", report.clean)]
    if report.corrupted:
        sets += [(f"repeat-{row.repeat}", row) for row in report.corrupted.repeats]
        sets += [("mean", report.corrupted.mean), ("std", report.corrupted.std)]
    return [[name, *(getattr(scores, metric) for metric in METRICS)] for name, scores in sets]


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
    """A metadata entry as list items, mappings nested under their key; what made the masks in words."""
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
