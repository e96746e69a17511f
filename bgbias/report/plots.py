"""Plots of evaluation reports: clean vs corrupted scores, the per-class drop, the profile, several runs side
by side; drawn as :mod:`bgbias.figures` draws every figure (the same reports give the same bytes).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bgbias.errors import OptionError
from bgbias.figures import new_figure, save_png
from bgbias.measurement.record import EvaluationReport
from bgbias.report.evaluation import METRIC_TITLES, index_reports
from bgbias.retrieval.metrics import METRICS

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

CLEAN_COLOUR = "#4c72b0"
CORRUPTED_COLOUR = "#dd8452"


def plot_clean_vs_corrupted(report: EvaluationReport, path: str | os.PathLike[str]) -> Path:
    """Grouped bars per metric (in %): clean, and the corrupted mean with its std as an error bar."""
    figure = new_figure(6.4, 4.0)
    axes = figure.add_subplot()
    corrupted = report.corrupted
    x, width = np.arange(len(METRICS)), 0.4 if corrupted else 0.8  # side by side, or clean alone
    _bars(axes, x - width / 2 if corrupted else x, [getattr(report.clean, name) for name in METRICS], None,
          width, "clean", CLEAN_COLOUR)
    if corrupted:
        repeats = len(corrupted.repeats)
        _bars(axes, x + width / 2, [getattr(corrupted.mean, name) for name in METRICS],
              [getattr(corrupted.std, name) for name in METRICS], width,
              f"corrupted (mean ± std, {repeats} repeat{'s' * (repeats > 1)})", CORRUPTED_COLOUR)
    axes.set_xticks(x, [METRIC_TITLES[name] for name in METRICS])
    axes.set_ylabel("%")
    axes.set_title(_report_title(report), fontsize=10)
    axes.margins(y=0.15)
    _legend_below(figure, axes)
    return save_png(figure, path)


def plot_per_class_drop(report: EvaluationReport, path: str | os.PathLike[str]) -> Path:
    """Histogram of the per-class MAP@R drop (points, clean − corrupted), its mean marked."""
    drops = [100 * row.drop for row in report.per_class if row.drop is not None]
    if not drops:
        raise OptionError(f"the evaluation of run {report.run or '?'} has no per-class drop to plot",
                          fix="evaluate with corrupted repeats (`bgbias eval --corrupted`) on classes of "
                              "two or more images")
    mean = float(np.mean(drops))
    figure = new_figure(6.4, 4.0)
    axes = figure.add_subplot()
    axes.hist(drops, bins=max(5, min(30, len(drops) // 2)), color=CORRUPTED_COLOUR, edgecolor="white")
    axes.axvline(0.0, color="0.5", linestyle=":", linewidth=1)
    axes.axvline(mean, color="black", linestyle="--", linewidth=1.5, label=f"mean {mean:.2f}")
    axes.set_xlabel("MAP@R drop per class (points, clean − corrupted)")
    axes.set_ylabel("classes")
    axes.set_title(_report_title(report), fontsize=10)
    axes.legend(loc="upper right", fontsize=8)
    return save_png(figure, path)


def plot_profile(report: EvaluationReport, path: str | os.PathLike[str]) -> Path:
    """The background-reliance profile's MAP@R (in %) as one bar per set, the std over its sets as an error
    bar, the BG-gap in its own colour and a random ranking's MAP@R as a dotted line."""
    if report.profile is None:
        raise OptionError(f"the evaluation of run {report.run or '?'} has no background-reliance profile to "
                          "plot", fix="evaluate with the profile (`bgbias eval --profile`)")
    sets = {row.set: row for row in report.profile.sets}
    chance = sets.pop("chance").mean.map_at_r
    figure = new_figure(7.2, 4.4)
    axes = figure.add_subplot()
    x = np.arange(len(sets))
    names = list(sets)
    gap = names.index("bg-gap")
    for chosen, label, colour in (([i for i in x if i != gap], "MAP@R", CLEAN_COLOUR),
                                  ([gap], "BG-gap (points)", CORRUPTED_COLOUR)):
        _bars(axes, x[chosen], [sets[names[i]].mean.map_at_r for i in chosen],
              [sets[names[i]].std.map_at_r for i in chosen], 0.7, label, colour)
    if chance is not None:
        axes.axhline(100 * chance, color="0.3", linestyle=":", linewidth=1.2,
                     label=f"chance {100 * chance:.2f}")
    axes.axhline(0.0, color="0.5", linewidth=0.8)
    axes.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
    axes.set_ylabel("MAP@R (%)")
    axes.set_title(f"Background-reliance profile: {_report_title(report)}", fontsize=10)
    axes.margins(y=0.15)
    _legend_below(figure, axes)
    return save_png(figure, path)


def plot_runs(reports: Sequence[EvaluationReport], path: str | os.PathLike[str]) -> Path:
    """Clean vs corrupted MAP@R (in %) of several runs, one panel per dataset (first-seen order), each run
    labelled ``method`` or ``method + BGAugment``, a method's base run before its BGAugment run."""
    by_key = index_reports(reports)
    if not by_key:
        raise OptionError("there are no evaluations to plot", fix="name at least one evaluated run")
    methods = list(dict.fromkeys(method for method, _, _, _ in by_key))
    panels: dict[tuple[str, str], list[EvaluationReport]] = {key[2:]: [] for key in by_key}
    for key in sorted(by_key, key=lambda k: (methods.index(k[0]), k[1])):
        panels[key[2:]].append(by_key[key])
    widest = max(len(runs) for runs in panels.values())
    figure = new_figure(1.5 + len(panels) * (0.9 + 0.75 * widest), 4.4)
    first = None
    for column, (panel, runs) in enumerate(panels.items(), start=1):
        axes = figure.add_subplot(1, len(panels), column, sharey=first)
        first = axes if first is None else first
        x = np.arange(len(runs))
        clean = [run.clean.map_at_r for run in runs]
        means = [run.corrupted.mean.map_at_r if run.corrupted else None for run in runs]
        stds = [run.corrupted.std.map_at_r if run.corrupted else None for run in runs]
        _bars(axes, x - 0.2, clean, None, 0.4, "clean", CLEAN_COLOUR)
        _bars(axes, x + 0.2, means, stds, 0.4, "corrupted (mean ± std)", CORRUPTED_COLOUR)
        axes.set_xticks(x, [run.label for run in runs],
                        rotation=30, ha="right", fontsize=8)
        dataset, split = panel
        axes.set_title(dataset if split == "test" else f"{dataset} ({split})", fontsize=10)
        axes.margins(y=0.15)
    first.set_ylabel("MAP@R (%)")
    _legend_below(figure, first)
    return save_png(figure, path)


def _bars(
    axes: Axes,
    x: np.ndarray,
    values: Sequence[float | None],
    stds: Sequence[float | None] | None,
    width: float,
    label: str,
    colour: str,
) -> None:
    """Bars in % with their values on top; a missing value draws no bar, a missing std no error bar."""
    heights = [np.nan if v is None else 100 * v for v in values]
    errors = None if stds is None else [0.0 if s is None else 100 * s for s in stds]
    bars = axes.bar(x, heights, width, yerr=errors, capsize=3, label=label, color=colour)
    axes.bar_label(bars, labels=["" if np.isnan(h) else f"{h:.2f}" for h in heights], fontsize=7, padding=2)


def _legend_below(figure: Figure, axes: Axes) -> None:
    """The legend of ``axes`` under the plot, where it cannot cover a bar."""
    figure.legend(*axes.get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize=8,
                  frameon=False)


def _report_title(report: EvaluationReport) -> str:
    return f"{report.label} on {report.dataset} ({report.split} split)"
