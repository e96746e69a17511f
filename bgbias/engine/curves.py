"""A run's training curves (``curves.png``), redrawn after every epoch from ``metrics.jsonl``: every term the
method logs and validation MAP@R with the selected epoch marked, where DML users look first."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bgbias.engine.run_dir import is_metric_number
from bgbias.figures import new_figure, save_png

TIMING_TERMS = ("train_seconds", "train_images_per_second")
VALIDATION_CURVES = {"val_map_at_r": "clean", "val_corrupted_map_at_r": "corrupted (train-pool backgrounds)"}
WATCHED_CURVES = {"test_map_at_r": "test, clean (watched)",
                  "test_corrupted_map_at_r": "test, corrupted (watched)"}
"""The test MAP@R columns of ``schedule.watch_test``: drawn dotted, since nothing is selected on them."""


def training_terms(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The numeric ``train_*`` columns of ``rows``, sorted, the total ``train_loss`` first."""
    names = {name for row in rows for name, value in row.items()
             if name.startswith("train_") and name not in TIMING_TERMS and is_metric_number(value)}
    return sorted(names, key=lambda name: (name != "train_loss", name))


def plot_training_curves(
    rows: Sequence[Mapping[str, Any]],
    path: str | os.PathLike[str],
    *,
    title: str,
    best_epoch: int | None,
    monitor: str,
) -> Path:
    """Two panels over epochs: the training terms (log scale where all are positive) and validation MAP@R in
    % with ``best_epoch`` (chosen on the ``monitor`` curve) marked, plus the watched test MAP@R if any."""
    figure = new_figure(11.0, 4.2)
    terms_axes, validation_axes = figure.subplots(1, 2)
    terms = training_terms(rows)
    for name in terms:
        points = [(row["epoch"], row[name]) for row in rows if is_metric_number(row.get(name))]
        width = 2.0 if name == "train_loss" else 1.0
        terms_axes.plot(*zip(*points, strict=True), marker=".", linewidth=width,
                        label=name.removeprefix("train_"))
    values = [row[name] for row in rows for name in terms if is_metric_number(row.get(name))]
    if values and min(values) > 0:
        terms_axes.set_yscale("log")
    terms_axes.set(title="training terms (mean over the epoch's steps)", xlabel="epoch")
    if terms:
        terms_axes.legend(fontsize=7, ncols=2 if len(terms) > 6 else 1)
    dotted = {"marker": "x", "linestyle": ":"}
    for curves, style in ((VALIDATION_CURVES, {"marker": "o"}), (WATCHED_CURVES, dotted)):
        for name, label in curves.items():
            points = [(row["epoch"], 100 * row[name]) for row in rows if is_metric_number(row.get(name))]
            if points:
                validation_axes.plot(*zip(*points, strict=True), label=label, **style)
    if best_epoch is not None:
        validation_axes.axvline(best_epoch, color="grey", linestyle="--", linewidth=1.0,
                                label=f"selected: epoch {best_epoch} (by {monitor} MAP@R)")
    validation_axes.set(title="validation MAP@R (%)", xlabel="epoch")
    validation_axes.legend(fontsize=7)
    figure.suptitle(title, fontsize=10)
    return save_png(figure, path)

