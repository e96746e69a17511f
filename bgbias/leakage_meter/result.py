"""What the leakage meter finds, as typed values, and the two files of it ``out=`` writes: ``leakage.json``
(every number) and ``leakage.md`` (the summary and the per-class table, for a person, linking the per-class
picture where there is one)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bgbias.fileio import make_dirs, write_json_atomic, write_text_atomic
from bgbias.leakage_meter.calibration import BenchEquivalent

RECORD_FORMAT = "bgbias-leakage"
RECORD_VERSION = 3
"""2: ``bench_rho``, the bias dial's ρ that leaks as much; 3: each view's ``degenerate``."""


@dataclass(frozen=True)
class ViewScores:
    """How well one view of the images (or chance) gives away their class: retrieval MAP@R and P@1 of the
    split against itself, and the cross-validated probe's accuracy; ``degenerate`` says why the view
    carries no information (then no leakage is read), None where it does."""

    map_at_r: float
    precision_at_1: float
    probe_accuracy: float
    degenerate: str | None = None


@dataclass(frozen=True)
class ClassLeakage:
    """One class's images: their mean MAP@R from the background alone, from the object alone, and by chance,
    and their own leakage share (:func:`~bgbias.leakage_meter.headline.leakage_share`)."""

    label: int
    images: int
    background_map_at_r: float
    foreground_map_at_r: float
    chance_map_at_r: float
    leakage: float

    @property
    def background_above_chance(self) -> float:
        """What the background alone retrieves of the class beyond chance: the per-class table's order."""
        return self.background_map_at_r - self.chance_map_at_r


@dataclass(frozen=True)
class DatasetLeakage:
    """The background leakage of one split of a dataset, seen through one frozen encoder
    (docs/leakage.md): the headline ``leakage`` with its bootstrap ``interval``, both views' scores beside
    chance, ``per_class``, the classes whose background gives them away most first, and ``bench_rho``, the
    ρ at which the bias dial's bench leaks as much (None where the dial was not calibrated for this encoder
    and fill)."""

    dataset: str
    split: str
    fill: str
    model: str
    images: int
    classes: int
    leakage: float
    interval: tuple[float, float]
    background: ViewScores
    foreground: ViewScores
    chance: ViewScores
    per_class: tuple[ClassLeakage, ...]
    bench_rho: BenchEquivalent | None = None

    def as_dict(self) -> dict[str, Any]:
        """Every number, JSON-able (NaN as None: JSON has none)."""
        return _json_safe({"format": RECORD_FORMAT, "version": RECORD_VERSION, **asdict(self),
                           "interval": list(self.interval),
                           "bench_rho": None if self.bench_rho is None else self.bench_rho.as_dict()})

    def markdown(self, top: int = 20, picture: str | None = None) -> str:
        """The summary and the ``top`` classes whose background gives them away most, then ``picture`` (a
        file beside the page showing some of them) where given."""
        low, high = self.interval
        views = {"background only": self.background, "object only": self.foreground, "chance": self.chance}
        about = (f"{self.images} images, {self.classes} classes; encoder {self.model}; "
                 f"hole filled: {self.fill}.")
        broken = [f"the {name} view is degenerate ({view.degenerate})" for name, view in views.items()
                  if view.degenerate]
        headline = ([f"No leakage is read: {' and '.join(broken)}, so it carries nothing to compare. "
                     "Check the masks: all full leave no background, all empty no object. " + about]
                    if broken else
                    [f"**{_pct(self.leakage)}** of what the background and the object retrieve above chance "
                     f"comes from the background (95 % interval {_pct(low)}–{_pct(high)}, bootstrap over "
                     f"images). {about}", "", _bench_words(self.bench_rho)])
        lines = [
            f"# Background leakage of {self.dataset} ({self.split})",
            "",
            *headline,
            "",
            "| view | MAP@R | P@1 | probe accuracy |",
            "|---|---:|---:|---:|",
            *(_row(name, view.map_at_r, view.precision_at_1, view.probe_accuracy)
              for name, view in views.items()),
            "",
            f"## The {min(top, len(self.per_class))} classes whose background gives them away most",
            "",
            "| class | images | background MAP@R | object MAP@R | chance | leakage |",
            "|---:|---:|---:|---:|---:|---:|",
            *(_row(f"{row.label} | {row.images}", row.background_map_at_r, row.foreground_map_at_r,
                   row.chance_map_at_r, row.leakage) for row in self.per_class[:top]),
        ]
        if picture is not None:
            lines += ["", "The first classes' background-only images (a row each, named by its AP@R) and "
                      "their nearest background-only neighbours (green: same class, red: other):", "",
                      f"![the classes whose background gives them away most]({picture})"]
        return "\n".join(lines) + "\n"

    def write(self, out: str | Path, picture: str | None = None) -> Path:
        """``leakage.json`` and ``leakage.md`` (linking ``picture``, a file in ``out``, where given) in folder
        ``out`` (made where missing); returns it."""
        folder = make_dirs(out)
        write_json_atomic(folder / "leakage.json", self.as_dict())
        write_text_atomic(folder / "leakage.md", self.markdown(picture=picture))
        return folder


def _bench_words(bench: BenchEquivalent | None) -> str:
    if bench is None:
        return ("No bench ρ: the bias dial is calibrated for the default encoder only, with each fill "
                "(docs/leakage.md, \"Calibration on the bias dial\").")
    return (f"The bias dial's bench leaks as much at **{bench.words()}** (the interval's ends read on the "
            f"same curve: the default encoder on the dial's benches with {bench.masks} masks; "
            "docs/leakage.md).")


def _row(first: str, *values: float) -> str:
    return "| " + " | ".join([first, *(_pct(value) for value in values)]) + " |"


def _pct(value: float) -> str:
    return "–" if math.isnan(value) else f"{100 * value:.1f} %"


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(item) for item in value]
    return value
