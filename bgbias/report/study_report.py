"""The study's page (``study.md``, ``study.html``): every run of a study in one page, answering with the seed
spread whether models lose MAP@R when backgrounds are replaced, whether BGAugment shrinks the loss (paired by
seed, :mod:`bgbias.report.seeds`), and whether a method's own mechanism shrinks it without BGAugment
(against the reference losses, unpaired: difference of means against twice its standard error).
"""

from __future__ import annotations

import math
import os
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bgbias.engine.run_dir import RESUME_TO_REWRITE, RunDir, is_metric_number, read_metrics, read_record
from bgbias.errors import OptionError, RecordError
from bgbias.figures import new_figure, save_png
from bgbias.measurement.intervals import IntervalSettings
from bgbias.measurement.record import EvaluationReport, run_label
from bgbias.report.differences import p_cell, signed_points
from bgbias.report.document import (
    Block,
    Bullets,
    Code,
    Figure,
    Heading,
    Paragraph,
    Strong,
    Table,
    write_document,
)
from bgbias.report.evaluation import percent
from bgbias.report.installations import installation_blocks, warn_if_mixed
from bgbias.report.mask_sensitivity import mask_sensitivity_section
from bgbias.report.paired import (
    EvaluationComparison,
    MetricDifference,
    compare_evaluations,
    draws_cell,
    settings_words,
)
from bgbias.report.runs_table import NOT_MEASURED, PROFILE_NOTE, Foreground, collect_runs, profile_table
from bgbias.report.seeds import (
    SEEDS_NOTE,
    Spread,
    absolute_drop,
    bgaugment_effects,
    clean_map,
    corrupted_map,
    corrupted_p1,
    drop_cell,
    exceeds_spread,
    over_seeds,
    paired_effect,
    relative_drop,
    seeds_by_setting,
    seeds_cell,
)

TableCells = tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]
"""A table's headers and rows, as :class:`~bgbias.report.document.Table` takes them."""

SETTINGS = (False, True)
"""Vanilla, then BGAugment: the column order of every side-by-side table."""

SETTING_COLOURS = {False: "#4c72b0", True: "#55a868"}
"""Vanilla blue, BGAugment green, in every figure of the page."""


@dataclass(frozen=True)
class StudyRunResult:
    """One run of the study as the report reads it: its folder, evaluation report and foreground-score
    summaries as :func:`~bgbias.report.runs_table.collect_runs` keys them (the attribution label last)."""

    folder: Path
    report: EvaluationReport
    foreground: Foreground
    evaluation: Path | None = None
    """The evaluation's folder (``report.json``, ``per_query.csv``); None for results put together by hand,
    which the comparisons over test queries leave out."""

    @property
    def key(self) -> tuple[str, bool]:
        return self.report.method, bool(self.report.bgaugment)


def collect_study_runs(
    run_dirs: Sequence[str | os.PathLike[str]], split: str = "test"
) -> list[StudyRunResult]:
    """Each folder's evaluation report on ``split`` and foreground scores by attribution label; a folder
    evaluated on several datasets (or with several mask folders) is an error naming it."""
    results = []
    for folder in map(Path, run_dirs):
        reports, foreground = collect_runs([folder], split)
        if len(reports) != 1:
            raise OptionError(f"the folder has {len(reports)} evaluation reports for the {split} split; a "
                              "study takes one per run", path=folder,
                              fix="remove the evaluations of other datasets or masks from its eval/ folder")
        # collect_runs found exactly one report.json of the split in the folder it names as the run.
        evaluation = next(Path(reports[0].run or folder).glob(f"eval/*-{split}/report.json")).parent
        results.append(StudyRunResult(folder, reports[0], foreground, evaluation))
    return results


def first_seed(results: Sequence[StudyRunResult]) -> tuple[int, list[StudyRunResult]]:
    """The smallest training seed among ``results`` and its runs: what the one-seed figures and Table 1 show
    (seed 0 in a study; a set of runs made by hand may lack it)."""
    seed = min((r.report.seed for r in results if r.report.seed is not None), default=0)
    return seed, [result for result in results if result.report.seed == seed]


# ------------------------------------------------------------------------------------------------- tables
def side_by_side(reports: Sequence[EvaluationReport]) -> TableCells:
    """Table 1 over seeds, one row per method: clean MAP@R, corrupted MAP@R, relative drop and corrupted
    P@1, vanilla then BGAugment."""
    groups = seeds_by_setting(reports)
    headers = ["method", "training seeds"]
    for bgaugment in SETTINGS:
        name = "BGAugment" if bgaugment else "vanilla"
        headers += [f"{name} clean", f"{name} corrupted", f"{name} drop (%)", f"{name} corrupted P@1"]
    rows = []
    for method in dict.fromkeys(method for method, _ in groups):
        seeds = {seed for bgaugment in SETTINGS for seed in groups.get((method, bgaugment), {})}
        row = [method, seeds_cell(seeds)]
        for bgaugment in SETTINGS:
            runs = list(groups.get((method, bgaugment), {}).values())
            row += [over_seeds(runs, clean_map).cell(), over_seeds(runs, corrupted_map).cell(),
                    drop_cell(over_seeds(runs, relative_drop)), over_seeds(runs, corrupted_p1).cell()]
        rows.append(tuple(row))
    return tuple(headers), tuple(rows)


def rankings(reports: Sequence[EvaluationReport]) -> dict[str, TableCells]:
    """Every (method, BGAugment) setting ranked by mean corrupted MAP@R (best first) and by mean relative drop
    (smallest first); ties keep the settings' order."""
    groups = seeds_by_setting(reports)
    tables = {}
    for title, value, best_first, cell in (
        ("corrupted MAP@R", corrupted_map, True, lambda s: s.cell()),
        ("relative drop (%)", relative_drop, False, drop_cell),
    ):
        scored = [(key, over_seeds(list(runs.values()), value)) for key, runs in groups.items()]
        scored = [(key, spread) for key, spread in scored if spread.mean is not None]
        scored.sort(key=lambda item: -item[1].mean if best_first else item[1].mean)
        rows = tuple((str(rank), run_label(*key), cell(spread), str(len(spread.values)))
                     for rank, (key, spread) in enumerate(scored, 1))
        tables[title] = (("rank", "run", title, "seeds"), rows)
    return tables


@dataclass(frozen=True)
class SeedComparison:
    """BGAugment − vanilla of one method's two runs of one training seed, over the test queries and the
    background draws of their evaluations (:func:`~bgbias.report.paired.compare_evaluations`)."""

    method: str
    seed: int
    comparison: EvaluationComparison

    @property
    def map_at_r(self) -> MetricDifference:
        return self.comparison.metrics["map_at_r"]


def bgaugment_comparisons(results: Sequence[StudyRunResult]) -> list[SeedComparison]:
    """Each method and training seed with a vanilla and a BGAugment run whose evaluation folders are known:
    the paired differences of MAP@R (clean, corrupted, drop, and the drop's parts where both were profiled) of
    the two, in the results' order."""
    by_key = {(r.report.method, bool(r.report.bgaugment), r.report.seed): r.evaluation for r in results
              if r.evaluation is not None and r.report.seed is not None}
    return [SeedComparison(method, seed, compare_evaluations(vanilla, by_key[(method, True, seed)],
                                                             metrics=("map_at_r",)))
            for (method, bgaugment, seed), vanilla in by_key.items()
            if not bgaugment and (method, True, seed) in by_key]


def comparison_table(found: Sequence[SeedComparison]) -> TableCells:
    """:func:`bgaugment_comparisons` as a table: the differences in points with their intervals, and
    p-values; the background effect's (the drop's part past the paste control) where any pair has it
    (:func:`shows_background_effect`)."""
    level = f"{100 * IntervalSettings().level:g} %"
    effect = shows_background_effect(found)
    headers = ("method", "training seed", f"Δ corrupted MAP@R [{level}]", "p", f"Δ clean MAP@R [{level}]",
               "p", f"Δ drop [{level}]", "p", *((f"Δ background effect [{level}]", "p") if effect else ()),
               "background draws")
    rows = tuple((pair.method, str(pair.seed),
                  *(cell for part in (pair.map_at_r.corrupted, pair.map_at_r.clean, pair.map_at_r.drop,
                                      *((pair.map_at_r.background_effect,) if effect else ()))
                    for cell in (signed_points(part), p_cell(part))),
                  draws_cell(pair.comparison))
                 for pair in found)
    return headers, rows


def shows_background_effect(found: Sequence[SeedComparison]) -> bool:
    """Whether any pair has the background effect (both runs profiled): the table shows it then."""
    return any(pair.map_at_r.background_effect is not None for pair in found)


QUERIES_NOTE = (
    "BGAugment run − vanilla run of one method and one training seed, in points of MAP@R (drop: clean − "
    "corrupted): the interval is over the test queries and the background draws of that pair's evaluations, "
    "and the p-value is that of no difference ({settings}). It says how sure a difference is on this test "
    "set, not whether another training seed would give it: that is the spread over training seeds, in the "
    "next table. Background draws: paired where both runs scored the same corrupted sets, else resampled "
    "apart.")
BACKGROUND_EFFECT_NOTE = (
    " Δ background effect: of the drop's part past the paste control (repasted − corrupted, the evaluation "
    "report's profile), paired per query as the drop is; it says whether BGAugment lowered what the "
    "background takes rather than what the paste costs, and is empty where a run was not profiled.")
COMPARISON_NOT_MEASURED = (
    "Not measured: this needs a method's vanilla and BGAugment runs of the same training seed, with their "
    "evaluation folders.")


@dataclass(frozen=True)
class Mechanism:
    """A method without BGAugment against the reference losses without BGAugment: both relative drops over
    seeds, the difference of their means and whether it is beyond twice its standard error."""

    method: str
    own: Spread
    reference: Spread
    verdict: str  # "smaller drop", "larger drop", "within the spread" or "n/a (one seed)"

    @property
    def difference(self) -> float:
        return self.own.mean - self.reference.mean


MECHANISM_NOT_MEASURED = (
    "Not measured: this needs, without BGAugment and scored on corrupted sets, runs of a method outside the "
    "reference losses and runs of at least one reference loss.")


def mechanism_comparisons(reports: Sequence[EvaluationReport], reference: Sequence[str]) -> list[Mechanism]:
    """Each method outside ``reference`` without BGAugment against the pooled seeds of the reference losses
    without BGAugment (unpaired: the runs of two methods share seeds but not a model, so there is nothing to
    pair)."""
    groups = seeds_by_setting(reports)
    pooled = Spread(tuple(v for method in reference for v in over_seeds(
        list(groups.get((method, False), {}).values()), relative_drop).values))
    found = []
    for method in dict.fromkeys(method for method, _ in groups):
        if method in reference or (method, False) not in groups:
            continue
        own = over_seeds(list(groups[(method, False)].values()), relative_drop)
        if own.mean is None or pooled.mean is None:
            continue
        verdict = "n/a (one seed)"
        if own.std is not None and pooled.std is not None:
            error = math.sqrt(own.std ** 2 / len(own.values) + pooled.std ** 2 / len(pooled.values))
            difference = own.mean - pooled.mean
            verdict = ("smaller drop" if difference < -2 * error else
                       "larger drop" if difference > 2 * error else "within the spread")
        found.append(Mechanism(method, own, pooled, verdict))
    return found


def mechanisms(reports: Sequence[EvaluationReport], reference: Sequence[str]) -> TableCells:
    """:func:`mechanism_comparisons` as a table."""
    rows = tuple((m.method, drop_cell(m.own), drop_cell(m.reference), f"{100 * m.difference:+.1f}", m.verdict)
                 for m in mechanism_comparisons(reports, reference))
    headers = ("method (vanilla)", "relative drop (%)", "reference losses' drop (%)", "difference (points)",
               "beyond twice the standard error")
    return headers, rows


Groups = Mapping[tuple[str, bool], Mapping[int, EvaluationReport]]
"""Reports by (method, BGAugment) and training seed, as :func:`seeds_by_setting` returns them."""


def answers(reports: Sequence[EvaluationReport], reference: Sequence[str]) -> tuple[tuple[Strong, str], ...]:
    """The study's three questions, each answered in a sentence from the runs with the seed spread: (the
    question, `` `` + its answer)."""
    groups = seeds_by_setting(reports)
    methods = list(dict.fromkeys(method for method, _ in groups))
    return (
        (Strong("Do models trained without BGAugment lose MAP@R when backgrounds are replaced?"),
         " " + _loss_answer(groups, methods)),
        (Strong("Does BGAugment shrink the loss?"), " " + _bgaugment_answer(groups, methods)),
        (Strong("Does a method's own mechanism shrink the drop without BGAugment?"),
         " " + _mechanism_answer(mechanism_comparisons(reports, reference), reference)),
    )


def _loss_answer(groups: Groups, methods: list[str]) -> str:
    losses, drops = {}, {}
    for method in methods:
        runs = list(groups.get((method, False), {}).values())
        loss = over_seeds(runs, absolute_drop)
        if loss.mean is not None:
            losses[method] = loss
            relative = over_seeds(runs, relative_drop).mean
            if relative is not None:  # none where the clean score is 0
                drops[method] = relative
    if not losses:
        return "Not measured: no method was run without BGAugment and scored on corrupted sets."
    share = ""
    if drops:
        least, most = min(drops, key=drops.__getitem__), max(drops, key=drops.__getitem__)
        share = (f", {100 * drops[least]:.1f} %" if least == most else
                 f", {100 * drops[least]:.1f} % ({least}) to {100 * drops[most]:.1f} % ({most})")
        share += " of their clean score"
    return (f"The vanilla runs of {_count(losses, methods)} lose {_span(s.mean for s in losses.values())} "
            f"points of MAP@R{share}. {_against_seeds(losses, 'The loss')}")


def _bgaugment_answer(groups: Groups, methods: list[str]) -> str:
    gains, cleans, drops = {}, [], []
    for method in methods:
        vanilla, augmented = groups.get((method, False), {}), groups.get((method, True), {})
        gain = paired_effect(vanilla, augmented, corrupted_map)
        if gain.mean is not None:
            gains[method] = gain
            cleans.append(paired_effect(vanilla, augmented, clean_map).mean)
            drops.append(paired_effect(vanilla, augmented, relative_drop).mean)
    if not gains:
        return "Not measured: no method has runs without and with BGAugment scored on corrupted sets."
    gained = _span([gain.mean for gain in gains.values()], "+")
    # The relative drop is undefined where a clean score is 0.
    dropped = (f", the relative drop by {_span(drops, '+')} percentage points" if any(
        drop is not None for drop in drops) else "")
    return (f"Paired by seed, BGAugment changes corrupted MAP@R by {gained} points for "
            f"{_count(gains, methods)}{dropped} and clean MAP@R by {_span(cleans, '+')} points. "
            f"{_against_seeds(gains, 'The gain')}")


def _mechanism_answer(found: Sequence[Mechanism], reference: Sequence[str]) -> str:
    if not found:
        return MECHANISM_NOT_MEASURED
    verdicts: dict[str, list[str]] = {}
    for m in found:
        verdicts.setdefault(m.verdict, []).append(f"{m.method} ({100 * m.difference:+.1f} points)")
    listed = "; ".join(f"{verdict}: {', '.join(names)}" for verdict, names in verdicts.items())
    return (f"Against the relative drop of the reference losses ({', '.join(reference)}; "
            f"{drop_cell(found[0].reference)} % over their seeds), beyond twice the standard error of the "
            f"difference: {listed}.")


def _against_seeds(spreads: Mapping[str, Spread], what: str) -> str:
    """Whether each method's value is further from zero than twice its std over seeds (as the effect table
    judges it), in a sentence; methods of one seed are named apart (their spread is not known)."""
    verdicts = {method: exceeds_spread(spread) for method, spread in spreads.items()}
    single = [method for method, verdict in verdicts.items() if verdict not in ("yes", "no")]
    several = [method for method in verdicts if method not in single]
    short = [method for method in several if verdicts[method] == "no"]
    if not several:
        return "With one training seed the seed spread is not known."
    if not short and not single:
        return f"{what} differs from zero by more than twice its std over seeds for every method."
    if len(several) == 1:
        verb = "does not differ" if short else "differs"
        text = (f"{what} {verb} from zero by more than twice its std over seeds for {several[0]}, the one "
                "method with several seeds")
    else:
        text = (f"{what} differs from zero by more than twice its std over seeds for "
                f"{len(several) - len(short)} of the {len(several)} methods with several seeds")
        text += f" (not for {', '.join(short)})" if short else ""
    return text + (f"; {', '.join(single)} had one seed." if single else ".")


def _count(found: Mapping[str, Any], methods: Sequence[str]) -> str:
    """Which methods a sentence speaks of: one by its name (the quick preset's page), else how many."""
    if len(found) == 1:
        return next(iter(found))
    if len(found) == len(methods):
        return f"all {len(methods)} methods"
    return f"{len(found)} of the {len(methods)} methods"


def _span(fractions: Any, sign: str = "") -> str:
    """The range of some fractions in points (percent), ``+`` signed with ``sign='+'``."""
    values = [100 * value for value in fractions if value is not None]
    low, high = f"{min(values):{sign}.1f}", f"{max(values):{sign}.1f}"
    return low if low == high else f"{low} to {high}"


def foreground_scores(results: Sequence[StudyRunResult]) -> TableCells:
    """Table 2 over seeds: per method and attribution, the foreground score vanilla and with BGAugment (mean
    over seeds of each run's mean over images, ± the std over seeds)."""
    by_setting: dict[tuple[str, str, bool], list[float]] = {}
    for result in results:
        method, bgaugment = result.key
        for key, summary in result.foreground.items():
            if summary.mean is not None:  # None: no image had a score (every map empty)
                by_setting.setdefault((method, key[3], bgaugment), []).append(summary.mean)
    rows = []
    for method, label in dict.fromkeys((method, label) for method, label, _ in by_setting):
        cells = [_fg_cell(Spread(tuple(by_setting.get((method, label, b), ())))) for b in SETTINGS]
        rows.append((method, label, *cells))
    return ("method", "attribution", "vanilla fg score", "BGAugment fg score"), tuple(rows)


PROFILE_SUMMARY = ("repasted", "random-bg", "worst-case", "only-fg", "only-bg-tiled", "only-bg-inpainted",
                   "mixed-rand", "bg-gap")
"""The profile's sets that answer "how much comes from the background", aggregated over seeds; the paste
control first."""
DROP_PARTS = {"paste_cost": "paste cost", "background_effect": "background effect"}
"""The parts of the drop the paste control splits it into (the profile's ``decomposition``), as columns."""


def profile_over_seeds(reports: Sequence[EvaluationReport]) -> TableCells:
    """Per (method, BGAugment), MAP@R of each set of :data:`PROFILE_SUMMARY` and each part of the drop
    (:data:`DROP_PARTS`) as mean ± std over the seeds' profiles; :data:`NOT_MEASURED` where no seed's record
    has it."""
    rows = []
    for key, runs in seeds_by_setting(reports).items():
        profiled = [run for run in runs.values() if run.profile]
        if profiled:
            rows.append((run_label(*key), str(len(profiled)),
                         *(_profile_cell(profiled, name) for name in PROFILE_SUMMARY),
                         *(_part_cell(profiled, part) for part in DROP_PARTS)))
    return ("run", "seeds", *PROFILE_SUMMARY, *DROP_PARTS.values()), tuple(rows)


def _part_cell(profiled: Sequence[EvaluationReport], part: str) -> str:
    found = [getattr(report.profile.decomposition["map_at_r"], part) for report in profiled
             if report.profile.decomposition]
    if not found:
        return NOT_MEASURED
    return Spread(tuple(value.difference.estimate for value in found if value is not None)).cell()


def _profile_cell(profiled: Sequence[EvaluationReport], name: str) -> str:
    rows = [row for report in profiled for row in report.profile.sets if row.set == name]
    if not rows:
        return NOT_MEASURED
    return Spread(tuple(row.mean.map_at_r for row in rows if row.mean.map_at_r is not None)).cell()


def profiles(reports: Sequence[EvaluationReport]) -> TableCells:
    """The background-reliance profile of every run that has one (:func:`profile_table`), with its seed."""
    headers, rows = profile_table(reports)
    seeds = [str(report.seed) for report in reports if report.profile]
    rows_with_seeds = tuple((row[0], seed, *row[2:]) for row, seed in zip(rows, seeds, strict=True))
    return (headers[0], "seed", *headers[2:]), rows_with_seeds


def _fg_cell(spread: Spread) -> str:
    if spread.mean is None:
        return ""
    return f"{spread.mean:.3f}" if spread.std is None else f"{spread.mean:.3f} ± {spread.std:.3f}"


@dataclass(frozen=True)
class Selection:
    """What model selection picked in a run that watched its test split, against the test scores of every
    epoch: the selected epoch's, the last one's, and the best one in hindsight."""

    run: str
    monitor: str
    selected: int
    scores: dict[str, dict[str, float]]  # "test_map_at_r" / "test_corrupted_map_at_r" → which → value
    best_epoch: dict[str, int]

    def cost(self, column: str) -> float:
        """How much the selected epoch's test score is below the best in hindsight."""
        return self.scores[column]["best"] - self.scores[column]["selected"]

    @property
    def selected_for(self) -> str:
        """The watched column that the monitored validation column stands for (``val_…`` → ``test_…``)."""
        return "test_" + self.monitor.removeprefix("val_")


WATCHED = {"test_map_at_r": "clean", "test_corrupted_map_at_r": "corrupted"}


def selections(folders: Sequence[Path]) -> list[Selection]:
    """The :class:`Selection` of every run in ``folders`` whose metrics have the watched test columns."""
    found = []
    for folder in folders:
        run = RunDir(folder)
        if not run.metrics_jsonl.is_file():  # a model bgbias did not train
            continue
        rows = [row for row in read_metrics(run) if all(column in row.columns for column in WATCHED)]
        if not rows:
            continue
        wrong = next(((row.epoch, column) for row in rows for column in WATCHED
                      if not is_metric_number(row.columns[column])), None)
        if wrong is not None:
            raise RecordError(f"the run's metrics of epoch {wrong[0]} have no number for {wrong[1]}",
                              path=run.metrics_jsonl, fix=RESUME_TO_REWRITE)
        record = read_record(run)
        if record is None:
            raise RecordError("the run's record is missing or damaged, so the epoch it selected is unknown",
                              path=run.record, fix=RESUME_TO_REWRITE)
        selected = record.best_epoch
        by_epoch = {row.epoch: row.columns for row in rows}
        if selected not in by_epoch:
            continue
        last = max(by_epoch)
        scores, best = {}, {}
        for column in WATCHED:
            best[column] = max(by_epoch, key=lambda epoch: (by_epoch[epoch][column], -epoch))
            scores[column] = {"selected": by_epoch[selected][column], "last": by_epoch[last][column],
                              "best": by_epoch[best[column]][column]}
        found.append(Selection(folder.name, record.monitor, selected, scores, best))
    return found


def selection_table(found: Sequence[Selection]) -> TableCells:
    headers = ["run", "selected by", "selected epoch"]
    for label in WATCHED.values():
        headers += [f"test {label}: selected", f"{label}: last", f"{label}: best (epoch)", f"{label}: cost"]
    rows = []
    for selection in found:
        row = [selection.run, selection.monitor, str(selection.selected)]
        for column in WATCHED:
            scores = selection.scores[column]
            row += [percent(scores["selected"]), percent(scores["last"]),
                    f"{percent(scores['best'])} ({selection.best_epoch[column]})",
                    f"{100 * selection.cost(column):.2f}"]
        rows.append(tuple(row))
    return tuple(headers), tuple(rows)


def selection_summary(found: Sequence[Selection], reports: Sequence[EvaluationReport]) -> str:
    """The selection cost of the score each run selects on (clean for vanilla runs, corrupted for
    BGAugment's), mean and max over the watched runs, against the seed std of the same score."""
    if not found:
        return "No run of this study watched its test split, so selection noise was not measured."
    costs = [selection.cost(selection.selected_for) for selection in found]
    seed_stds = [spread.std for runs in seeds_by_setting(reports).values()
                 for spread in (over_seeds(list(runs.values()), clean_map),
                                over_seeds(list(runs.values()), corrupted_map))
                 if spread.std is not None]
    runs = "the watched run" if len(found) == 1 else f"the {len(found)} watched runs"
    text = (f"Over {runs}, the epoch chosen on validation scores on average "
            f"{100 * statistics.fmean(costs):.2f} points (at most {100 * max(costs):.2f}) below the best "
            "epoch in hindsight on the test score it selects for (clean for vanilla runs, corrupted for "
            "BGAugment runs).")
    if seed_stds:
        text += (f" The std over training seeds of the study's clean and corrupted MAP@R is "
                 f"{100 * statistics.median(seed_stds):.2f} points in the median setting "
                 f"({100 * min(seed_stds):.2f}–{100 * max(seed_stds):.2f}).")
    return text


# ------------------------------------------------------------------------------------------------ figures
def plot_over_seeds(reports: Sequence[EvaluationReport], path: str | os.PathLike[str]) -> Path:
    """The side-by-side table as a picture: a bar at the mean over training seeds and a dot per seed, so that
    BGAugment's effect is seen beside the seed spread."""
    groups = seeds_by_setting(reports)
    methods = list(dict.fromkeys(method for method, _ in groups))
    series = [(bgaugment, value, label) for bgaugment in SETTINGS
              for value, label in ((clean_map, "clean"), (corrupted_map, "corrupted"))]
    width = 0.8 / len(series)
    figure = new_figure(1.4 + 1.15 * len(methods), 4.4)
    axes = figure.add_subplot()
    x = np.arange(len(methods))
    for index, (bgaugment, value, label) in enumerate(series):
        offset = x + (index - (len(series) - 1) / 2) * width
        spreads = [over_seeds(list(groups.get((method, bgaugment), {}).values()), value)
                   for method in methods]
        heights = [np.nan if spread.mean is None else 100 * spread.mean for spread in spreads]
        axes.bar(offset, heights, width, color=SETTING_COLOURS[bgaugment],
                 alpha=1.0 if label == "corrupted" else 0.4,
                 label=f"{'BGAugment' if bgaugment else 'vanilla'}, {label}")
        for position, spread in zip(offset, spreads, strict=True):
            axes.plot([position] * len(spread.values), [100 * v for v in spread.values], "o", color="black",
                      markersize=2.5)
    axes.set_xticks(x, methods, rotation=20, ha="right", fontsize=8)
    axes.set_ylabel("MAP@R (%)")
    axes.set_title("bars: mean over training seeds; dots: one per seed", fontsize=9)
    figure.legend(*axes.get_legend_handles_labels(), loc="outside lower center", ncols=4, fontsize=8,
                  frameon=False)
    return save_png(figure, path)


def plot_per_class_drops(results: Sequence[StudyRunResult], path: str | os.PathLike[str]) -> Path:
    """Per method, the histogram of per-class relative drops of MAP@R (%), vanilla and BGAugment overlaid."""
    methods = list(dict.fromkeys(result.key[0] for result in results))
    columns = min(5, len(methods))
    rows = math.ceil(len(methods) / columns)
    figure = new_figure(max(6.0, 2.6 * columns + 0.6), 2.3 * rows + 0.9)
    bins = np.linspace(-50, 100, 31)
    for index, method in enumerate(methods, 1):
        axes = figure.add_subplot(rows, columns, index)
        for result in results:
            if result.key[0] != method:
                continue
            drops = [100 * row.relative_drop for row in result.report.per_class
                     if row.relative_drop is not None]
            axes.hist(np.clip(drops, bins[0], bins[-1]), bins=bins, alpha=0.55,
                      color=SETTING_COLOURS[result.key[1]], label="BGAugment" if result.key[1] else "vanilla")
        axes.set_title(method, fontsize=9)
        axes.tick_params(labelsize=7)
        if index == 1:
            axes.legend(fontsize=7)
    figure.supxlabel("relative drop of a class's MAP@R, clean → corrupted (%)", fontsize=9)
    figure.supylabel("classes", fontsize=9)
    return save_png(figure, path)


# ------------------------------------------------------------------------------------------------- report
def masks_blocks(reports: Sequence[EvaluationReport]) -> list[Block]:
    """Which masks the runs' corrupted sets were cut out with and what made them (a model, backend and
    precision): one line per folder and maker, with how many runs used it where there are several."""
    used = Counter((masks.masks, masks.words()) for report in reports
                   if (masks := report.used_masks) is not None)
    if not used:
        return []
    lines = tuple((Code(folder), f" ({words})" + (f": {count} runs" if len(used) > 1 else ""))
                  for (folder, words), count in sorted(used.items()))
    if len(lines) == 1:
        return [Paragraph(("Masks of the corrupted sets: ", *lines[0], "."))]
    return [Paragraph("Masks of the corrupted sets (the runs were evaluated with different ones):"),
            Bullets(lines)]


def empty_mask_blocks(results: Sequence[StudyRunResult]) -> list[Block]:
    """Where any run's evaluation had images whose mask shows no object: how many, in which runs, and that
    every corrupted score on the page counts them; nothing where none had."""
    flagged = [result for result in results if result.report.empty_masks and result.report.empty_masks.images]
    if not flagged:
        return []
    counts = sorted({(result.report.empty_masks.images, result.report.images) for result in flagged
                     if result.report.empty_masks is not None})
    shown = "; ".join(f"{empty} of {images} images" for empty, images in counts)
    return [Paragraph((
        Strong(f"Images whose saliency mask shows no object ({shown}) in the evaluations of {len(flagged)} "
               f"of the {len(results)} runs"),
        ": their corrupted copy is the new background alone, and every corrupted score and drop on this page "
        "counts them. Each run's report.md names them, counts them per class and gives its scores without "
        "them."))]


def write_study_report(
    results: Sequence[StudyRunResult],
    out_dir: str | os.PathLike[str],
    *,
    title: str,
    reference: Sequence[str],
    figures: Sequence[Figure] = (),
    failures: Mapping[str, str] | None = None,
) -> dict[str, Path]:
    """``study.md`` and ``study.html`` (with ``over-seeds.png`` and ``per-class-drop.png``) in ``out_dir``,
    with ``figures`` and the runs that failed (``failures``: run folder name → error), which the tables leave
    out."""
    out = Path(out_dir)
    methods = list(dict.fromkeys(result.key[0] for result in results))
    # Each method's runs together, vanilla before BGAugment, by seed, whatever order the folders came in.
    results = sorted(results, key=lambda r: (methods.index(r.key[0]), r.key[1], r.report.seed or 0))
    reports = [result.report for result in results]
    seed, first = first_seed(results)
    histogram = plot_per_class_drops(first, out / "per-class-drop.png")
    seed_bars = plot_over_seeds(reports, out / "over-seeds.png")
    headers, rows = side_by_side(reports)
    effect_headers, effect_rows = bgaugment_effects(reports)
    ranked = rankings(reports)
    mechanism = mechanisms(reports, reference)
    profile = profiles(reports)
    found = selections([result.folder for result in results])
    compared = bgaugment_comparisons(results)
    blocks: list[Block] = [
        Paragraph("MAP@R and P@1 in %. " + SEEDS_NOTE.replace("column", "column of seeds.md")),
        *masks_blocks(reports),
        *empty_mask_blocks(results),
        *installation_blocks(reports),
        Heading("Answers"),
        Bullets(answers(reports, reference)),
        Heading("Clean vs corrupted MAP@R, without and with BGAugment"),
        Table(headers, rows, caption="mean ± std over training seeds"),
        Figure(seed_bars, "clean and corrupted MAP@R without and with BGAugment: bars at the mean over "
                          "training seeds, a dot per seed"),
        Heading("BGAugment's effect over test queries and background draws, one training seed"),
        *([Paragraph(QUERIES_NOTE.format(settings=settings_words(IntervalSettings()))
                     + (BACKGROUND_EFFECT_NOTE if shows_background_effect(compared) else "")),
           Table(*comparison_table(compared), caption="points of MAP@R, per training seed")]
          if compared else [Paragraph(COMPARISON_NOT_MEASURED)]),
        Heading("BGAugment's effect over training seeds, paired by seed"),
        Table(tuple(effect_headers), tuple(map(tuple, effect_rows)),
              caption="points of MAP@R, mean ± std over training seeds"),
        Heading("Does a method's own mechanism shrink the drop without BGAugment?"),
        *([Paragraph(f"Each method outside the reference losses ({', '.join(reference)}) without "
                     "BGAugment, against the pooled seeds of the reference losses without BGAugment."),
           Table(*mechanism)] if mechanism[1] else [Paragraph(MECHANISM_NOT_MEASURED)]),
        Heading("Rankings"),
        *[Table(*ranked[title], caption=f"by {title}") for title in ranked],
        Heading("Background-reliance profile"),
        *([Paragraph(PROFILE_NOTE + " MAP@R in %: first over training seeds for the sets that say how much "
                     "comes from the background, with the drop split into paste cost (clean − repasted) and "
                     "background effect (repasted − random-bg), then every set of every run."),
           Table(*profile_over_seeds(reports), caption="mean ± std over training seeds"),
           Table(*profile, caption="every run")] if profile[1] else
          [Paragraph(("No run was profiled (the quick preset leaves the profile out; ",
                      Code("bgbias eval --profile"), " adds it to a run, ",
                      Code("bgbias study --preset full"), " to every run)."))]),
        *mask_sensitivity_section(reports),
        Heading("Foreground scores (the paper's Table 2)"),
        Table(*foreground_scores(results),
              caption="share of attribution on the object; mean ± std over seeds"),
        Heading("Model selection"),
        Paragraph(selection_summary(found, reports)),
        *([Table(*selection_table(found),
                 caption="test MAP@R (%) of the watched runs; cost = best − selected")] if found else []),
        Heading("Figures"),
        Figure(histogram, f"per-class relative drop of MAP@R, training seed {seed}"),
        *figures,
        Heading("Runs"),
        Bullets(tuple((f"{run_label(*result.key)}, seed {result.report.seed}: ",
                       Code(str(result.folder))) for result in results)),
        *([Heading("Failed runs"),
           Paragraph(("Left out of every table above; the next ", Code("bgbias study"),
                      " tries each again (a failed training resumes from its last checkpoint). Their "
                      "tracebacks are in the study folder's failures.json.")),
           Bullets(tuple((Code(name), f": {(error.splitlines() or [''])[0]}")
                         for name, error in failures.items()))]
          if failures else []),
    ]
    warn_if_mixed(reports, "the study page")
    return write_document(blocks, out, "study", title)
