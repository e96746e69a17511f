"""Runs of several training seeds, aggregated: how much of a difference between methods, or BGAugment's
effect, is larger than what another training seed changes.

Two spreads are kept apart everywhere: inside one run, over its corrupted repeats; across runs of one
setting, the sample std over training seeds (ddof 1). BGAugment's effect is paired by seed, and *larger than
the seed spread* when its mean is more than twice the std of the differences (with at least two pairs).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bgbias.errors import OptionError
from bgbias.fileio import write_json_atomic, write_text_atomic
from bgbias.measurement.record import Checkpoint, EvaluationReport, run_label
from bgbias.report.document import Heading, Paragraph, Table, to_markdown
from bgbias.report.evaluation import percent, percent_spread

SEED_COLUMNS = [
    "method", "training seeds", "selected epochs", "clean MAP@R", "corrupted MAP@R",
    "repeats std (mean over seeds)", "relative drop (%)", "clean P@1", "corrupted P@1",
]
EFFECT_COLUMNS = [
    "method", "paired seeds", "Δ corrupted MAP@R (BGAugment − vanilla)", "Δ clean MAP@R",
    "larger than the seed spread",
]


@dataclass(frozen=True)
class Spread:
    """A score over training seeds: its values, mean and sample std (None with fewer than two)."""

    values: tuple[float, ...]

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    @property
    def std(self) -> float | None:
        return statistics.stdev(self.values) if len(self.values) > 1 else None

    def cell(self) -> str:
        return percent_spread(self.mean, self.std)


def seeds_by_setting(
    reports: Sequence[EvaluationReport],
) -> dict[tuple[str, bool], dict[int, EvaluationReport]]:
    """Evaluation reports of one dataset and split by (method, BGAugment) and training seed, in the order the
    settings first appear; two reports of one setting and seed are an error naming both runs."""
    groups: dict[tuple[str, bool], dict[int, EvaluationReport]] = {}
    places = {(r.dataset, r.split) for r in reports}
    if len(places) > 1:
        raise OptionError(f"reports of several datasets or splits: {sorted(places)}",
                          fix="aggregate the runs of one dataset and split at a time")
    for report in reports:
        key = (report.method, bool(report.bgaugment))
        seed = report.seed
        if seed is None:
            raise OptionError(f"the report of {report.run or '?'} does not record its training seed",
                              fix="evaluate the run again with this version of bgbias (bgbias eval)")
        seeds = groups.setdefault(key, {})
        if seed in seeds:
            raise OptionError(
                f"two runs of {run_label(*key)} with seed {seed}: {seeds[seed].run or '?'} and "
                f"{report.run or '?'}",
                fix="pass one run per method, setting and seed",
            )
        seeds[seed] = report
    return groups


def seeds_table(reports: Sequence[EvaluationReport]) -> tuple[list[str], list[list[str]]]:
    """One row per (method, BGAugment): the scores as mean ± std over training seeds (in %), the selected
    epoch of each seed, and the mean over seeds of each run's std over its corrupted repeats."""
    rows = []
    for (method, bgaugment), by_seed in seeds_by_setting(reports).items():
        runs = [by_seed[seed] for seed in sorted(by_seed)]
        corrupted = [run for run in runs if run.corrupted]
        inner = Spread(tuple(run.corrupted.std.map_at_r for run in corrupted
                             if run.corrupted.std.map_at_r is not None))
        relative = over_seeds(corrupted, relative_drop)
        rows.append([
            run_label(method, bgaugment),
            seeds_cell(by_seed),
            ", ".join(map(_selected_epoch, runs)),
            over_seeds(runs, clean_map).cell(),
            over_seeds(corrupted, corrupted_map).cell(),
            percent(inner.mean),
            drop_cell(relative),
            over_seeds(runs, lambda run: run.clean.precision_at_1).cell(),
            over_seeds(corrupted, corrupted_p1).cell(),
        ])
    return SEED_COLUMNS, rows


def seeds_cell(seeds: Iterable[int]) -> str:
    """Training seeds as their count and ids, ``3 (0, 1, 2)``: a lone id, ``0``, reads as a count of none."""
    ids = sorted(seeds)
    return f"{len(ids)} ({', '.join(map(str, ids))})"


def _selected_epoch(report: EvaluationReport) -> str:
    """The epoch of the checkpoint a report evaluated, ``?`` where its report does not say."""
    checkpoint = report.checkpoint
    if not isinstance(checkpoint, Checkpoint) or "epoch" not in checkpoint.model_fields_set:
        return "?"
    return str(checkpoint.epoch)


def bgaugment_effects(reports: Sequence[EvaluationReport]) -> tuple[list[str], list[list[str]]]:
    """One row per method with runs of both settings: BGAugment's paired effect over the seeds both have."""
    groups = seeds_by_setting(reports)
    rows = []
    for method in dict.fromkeys(method for method, _ in groups):
        vanilla, augmented = groups.get((method, False), {}), groups.get((method, True), {})
        paired = sorted(set(vanilla) & set(augmented))
        if not paired:
            continue
        corrupted = paired_effect(vanilla, augmented, corrupted_map)
        clean = paired_effect(vanilla, augmented, clean_map)
        rows.append([method, seeds_cell(paired), corrupted.cell(), clean.cell(),
                     exceeds_spread(corrupted)])
    return EFFECT_COLUMNS, rows


def exceeds_spread(difference: Spread) -> str:
    """``yes`` / ``no`` where the paired differences' mean is / is not more than twice their std; ``n/a``
    with fewer than two pairs (one seed says nothing about the spread)."""
    if difference.std is None or difference.mean is None:
        return "n/a (one seed)"
    return "yes" if abs(difference.mean) > 2 * difference.std else "no"


def paired_effect(vanilla: Mapping[int, EvaluationReport], augmented: Mapping[int, EvaluationReport],
                  value: Callable[[EvaluationReport], float | None]) -> Spread:
    """Per training seed that both settings have, ``value`` of the BGAugment run minus that of the vanilla
    run (runs by seed, as :func:`seeds_by_setting` groups them)."""
    pairs = [(value(augmented[seed]), value(vanilla[seed])) for seed in sorted(set(vanilla) & set(augmented))]
    return Spread(tuple(a - b for a, b in pairs if a is not None and b is not None))


def over_seeds(
    runs: Sequence[EvaluationReport], value: Callable[[EvaluationReport], float | None]
) -> Spread:
    """``value(report)`` over the runs (one per training seed) where the report has it."""
    return Spread(tuple(v for v in map(value, runs) if v is not None))


def clean_map(report: EvaluationReport) -> float | None:
    return report.clean.map_at_r


def corrupted_map(report: EvaluationReport) -> float | None:
    """The mean over the corrupted repeats; None for a run evaluated clean only."""
    return report.corrupted.mean.map_at_r if report.corrupted else None


def corrupted_p1(report: EvaluationReport) -> float | None:
    return report.corrupted.mean.precision_at_1 if report.corrupted else None


def absolute_drop(report: EvaluationReport) -> float | None:
    """Clean − corrupted MAP@R, a fraction; None for a run evaluated clean only."""
    drop = (report.drop or {}).get("map_at_r")
    return None if drop is None else drop.absolute


def relative_drop(report: EvaluationReport) -> float | None:
    """(clean − corrupted) / clean of MAP@R, a fraction; None for a run evaluated clean only."""
    drop = (report.drop or {}).get("map_at_r")
    return None if drop is None else drop.relative


def drop_cell(spread: Spread) -> str:
    """A relative drop (a fraction) in % with one decimal, ± its std over seeds where there is one."""
    if spread.mean is None:
        return ""
    text = f"{100 * spread.mean:.1f}"
    return text if spread.std is None else f"{text} ± {100 * spread.std:.1f}"


SEEDS_NOTE = (
    "Each score is the mean ± sample std over training seeds; the corrupted score of one run is itself the "
    "mean over its corrupted repeats, whose std is the 'repeats std' column (mean over seeds). BGAugment's "
    "effect is paired per seed (BGAugment run − vanilla run of the same seed), mean ± std over seeds; it is "
    "larger than the seed spread when the mean exceeds twice that std."
)


def write_seeds_report(
    reports: Sequence[EvaluationReport], out_dir: str | os.PathLike[str]
) -> dict[str, Path]:
    """``seeds.md`` (the seeds table, BGAugment's paired effects and how to read them) and ``seeds.json`` (the
    same cells) in ``out_dir``."""
    out = Path(out_dir)
    headers, rows = seeds_table(reports)
    effect_headers, effects = bgaugment_effects(reports)
    text = to_markdown([
        Heading("Over training seeds (MAP@R and P@1 in %)"), Table(tuple(headers), tuple(map(tuple, rows))),
        Heading("BGAugment's effect, paired by seed (points)"),
        Table(tuple(effect_headers), tuple(map(tuple, effects))), Paragraph(SEEDS_NOTE),
    ], out)
    write_text_atomic(out / "seeds.md", text)
    write_json_atomic(out / "seeds.json", {"seeds": {"columns": headers, "rows": rows},
                                           "bgaugment_effect": {"columns": effect_headers, "rows": effects}})
    return {"seeds_md": out / "seeds.md", "seeds_json": out / "seeds.json"}
