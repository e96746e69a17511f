"""The bias dial: the clean → corrupted drop of one method, without and with BGAugment, on the bench rebuilt
at several background–class correlations ρ (``bgbias study --dial``; docs/study.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bgbias.errors import OptionError
from bgbias.figures import new_figure, save_png
from bgbias.fileio import write_json_atomic, write_text_atomic
from bgbias.measurement.record import EvaluationReport, run_label
from bgbias.report.document import Heading, Paragraph, Table, to_markdown
from bgbias.report.folder import DIAL_FILES, write_report_folder
from bgbias.report.seeds import Spread, clean_map, corrupted_map, drop_cell, over_seeds, relative_drop

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MASK_LABELS = {"ground-truth": "exact masks", "u2netp": "U²-Net masks"}
"""How the dial names its mask sources (the study's ``--masks`` values)."""


@dataclass(frozen=True)
class DialPoint:
    """The evaluation reports (one per training seed) of one method setting on the bench at ``rho`` with
    masks from ``masks``."""

    rho: float
    masks: str
    bgaugment: bool
    reports: tuple[EvaluationReport, ...]

    def spread(self, value: Any) -> Spread:
        """``value(report)`` over the training seeds, where the report has it."""
        return over_seeds(self.reports, value)


DIAL_COLUMNS = ["ρ", "masks", "run", "seeds", "clean MAP@R", "corrupted MAP@R", "relative drop (%)"]


def dial_table(points: Sequence[DialPoint], method: str) -> tuple[list[str], list[list[str]]]:
    """One row per point, by masks, ρ, then vanilla before BGAugment; MAP@R in %, mean ± std over seeds."""
    rows = []
    for point in sorted(points, key=lambda p: (list(MASK_LABELS).index(p.masks), p.rho, p.bgaugment)):
        rows.append([
            f"{point.rho:g}", MASK_LABELS[point.masks], run_label(method, point.bgaugment),
            str(len(point.reports)), point.spread(clean_map).cell(), point.spread(corrupted_map).cell(),
            drop_cell(point.spread(relative_drop)),
        ])
    return DIAL_COLUMNS, rows


def plot_dial(points: Sequence[DialPoint], path: str | os.PathLike[str], method: str) -> Path:
    """Two panels against ρ, the relative drop and the corrupted MAP@R (%): vanilla and BGAugment in two
    colours, exact masks solid and U²-Net masks dashed, error bars the std over training seeds."""
    if not points:
        raise OptionError("the dial has no evaluated runs to plot", fix="run `bgbias study --dial` first")
    curves = {key: [DialMark(p.rho, _percent(p.spread(relative_drop)), _percent(p.spread(corrupted_map)))
                    for p in line] for key, line in _lines(points).items()}
    return save_png(dial_figure(curves, method), path)


@dataclass(frozen=True)
class DialMark:
    """One point of a dial curve as drawn: ρ, and the relative drop and the corrupted MAP@R as (mean, std over
    seeds) in %, None where no run has the score; a results record (docs/results.md) draws the same figure."""

    rho: float
    drop: tuple[float, float] | None
    corrupted: tuple[float, float] | None


def dial_figure(curves: Mapping[tuple[str, bool], Sequence[DialMark]], method: str) -> Figure:
    """:func:`plot_dial`'s figure from its curves, one per (masks, BGAugment) in the order given."""
    figure = new_figure(11.0, 4.2)
    drop_axes, corrupted_axes = figure.subplots(1, 2)
    colours = {False: "#4c72b0", True: "#55a868"}
    styles = {"ground-truth": "-", "u2netp": "--"}
    for (masks, bgaugment), marks in curves.items():
        label = f"{run_label(method, bgaugment)}, {MASK_LABELS[masks]}"
        for axes, score in ((drop_axes, "drop"), (corrupted_axes, "corrupted")):
            drawn = [(mark.rho, getattr(mark, score)) for mark in marks if getattr(mark, score) is not None]
            if drawn:
                axes.errorbar([rho for rho, _ in drawn], [mean for _, (mean, _) in drawn],
                              yerr=[std for _, (_, std) in drawn], color=colours[bgaugment],
                              linestyle=styles[masks], marker="o", capsize=3, label=label)
    drop_axes.set(title="clean → corrupted drop of MAP@R (%)", xlabel="background–class correlation ρ",
                  ylabel="relative drop (%)")
    corrupted_axes.set(title="corrupted MAP@R (%)", xlabel="background–class correlation ρ")
    drop_axes.legend(fontsize=7)
    figure.suptitle("The bias dial: solid lines use the bench's exact alpha masks (the model's reliance "
                    "alone), dashed ones U²-Net's (plus mask errors)", fontsize=9)
    return figure


def _percent(spread: Spread) -> tuple[float, float] | None:
    return None if spread.mean is None else (100 * spread.mean, 100 * (spread.std or 0.0))


def write_dial_report(
    points: Sequence[DialPoint], out_dir: str | os.PathLike[str], method: str
) -> dict[str, Path]:
    """``dial.md``, ``dial.json`` (the same cells and every run) and ``dial.png`` in ``out_dir``, which they
    replace all at once or not at all."""
    return write_report_folder(out_dir, lambda stage: _write_dial(points, stage, method), DIAL_FILES)


def _write_dial(points: Sequence[DialPoint], out: Path, method: str) -> dict[str, Path]:
    headers, rows = dial_table(points, method)
    paths = {"dial_md": out / "dial.md", "dial_json": out / "dial.json", "dial_png": out / "dial.png"}
    plot_dial(points, paths["dial_png"], method)
    text = to_markdown([
        Heading(f"The bias dial: {method}, clean vs corrupted MAP@R against ρ"),
        Table(tuple(headers), tuple(map(tuple, rows))),
        Paragraph("ρ is the share of a class's views that show the class's home background. Scores are "
                  "mean ± std over training seeds (one seed: the value alone); a run's corrupted score is "
                  "itself the mean over its corrupted repeats. Exact masks: the bench's alpha masks for "
                  "BGAugment and the corrupted sets; U²-Net masks: u2netp's, as on a real dataset."),
    ], out)
    write_text_atomic(paths["dial_md"], text)
    write_json_atomic(paths["dial_json"], {
        "method": method, "columns": headers, "rows": rows,
        "runs": [{"rho": p.rho, "masks": p.masks, "bgaugment": p.bgaugment,
                  "runs": [r.run for r in p.reports]} for p in points],
    })
    return paths


def _lines(points: Sequence[DialPoint]) -> dict[tuple[str, bool], list[DialPoint]]:
    lines: dict[tuple[str, bool], list[DialPoint]] = {}
    for point in sorted(points, key=lambda p: p.rho):
        lines.setdefault((point.masks, point.bgaugment), []).append(point)
    return dict(sorted(lines.items(), key=lambda item: (list(MASK_LABELS).index(item[0][0]), item[0][1])))
