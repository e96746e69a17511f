"""What the leakage meter finds, as typed values, and the two files of it ``out=`` writes: ``leakage.json``
(every number) and ``leakage.md`` (the summary and the per-class table, for a person, linking the per-class
picture where there is one; class names are the dataset's, shown as text through
:mod:`bgbias.report.document`)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bgbias.data.items import shown_class
from bgbias.fileio import make_dirs, write_json_atomic, write_text_atomic
from bgbias.leakage_meter.calibration import BenchEquivalent
from bgbias.report.document import Block, Heading, Paragraph, Strong, Table, Text, to_markdown
from bgbias.saliency.records import shown_mask_maker
from bgbias.schema import format_header

RECORD_FORMAT = "bgbias-leakage-record"


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
    their own leakage share (:func:`~bgbias.leakage_meter.headline.leakage_share`), the class's name as the
    dataset gives it, and how many of its images have a mask that shows no object."""

    label: int
    images: int
    background_map_at_r: float
    foreground_map_at_r: float
    chance_map_at_r: float
    leakage: float
    name: str | None = None
    empty_masks: int = 0

    @property
    def background_above_chance(self) -> float:
        """What the background alone retrieves of the class beyond chance: the per-class table's order."""
        return self.background_map_at_r - self.chance_map_at_r


@dataclass(frozen=True)
class DatasetLeakage:
    """The background leakage of one split of a dataset, seen through one frozen encoder (docs/leakage.md):
    the headline with its bootstrap interval, both views' scores beside chance, the classes that leak most
    first, and ``bench_rho`` (None where the dial was not calibrated for this encoder and fill)."""

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
    empty_masks: int = 0
    masks: str | None = None
    """The saliency masks folder the views were cut out with; None where every image came with its mask."""
    mask_maker: dict[str, Any] | None = None
    """What made those masks (:func:`~bgbias.saliency.records.mask_maker`)."""

    def as_dict(self) -> dict[str, Any]:
        """Every number, JSON-able (NaN as None: JSON has none)."""
        return _json_safe({**format_header(RECORD_FORMAT), **asdict(self)})

    def markdown(self, top: int = 20, picture: str | None = None) -> str:
        """The summary (with the images whose masks are empty), the ``top`` classes whose background gives
        them away most, then ``picture`` (a file beside the page showing some of them) where given."""
        low, high = self.interval
        views = {"background only": self.background, "object only": self.foreground, "chance": self.chance}
        flagged = bool(self.empty_masks)
        about = (f"{self.images} images, {self.classes} classes; encoder {self.model}; "
                 f"hole filled: {self.fill}; masks: "
                 + ("each image's own." if self.masks is None else
                    f"{self.masks} ({shown_mask_maker(self.mask_maker)})."))
        broken = [f"the {name} view is degenerate ({view.degenerate})" for name, view in views.items()
                  if view.degenerate]
        headline: list[Block] = (
            [Paragraph(f"No leakage is read: {' and '.join(broken)}, so it carries nothing to compare. Check "
                       f"the masks: all full leave no background, all empty no object. {about}")]
            if broken else
            [Paragraph((Strong(_pct(self.leakage)), " of what the background and the object retrieve above "
                        f"chance comes from the background (95 % interval {_pct(low)}–{_pct(high)}, "
                        f"bootstrap over images). {about}")),
             Paragraph(_bench_words(self.bench_rho))])
        blocks: list[Block] = [
            headline[0],
            Paragraph(_empty_words(self)),
            *headline[1:],
            Table(("view", "MAP@R", "P@1", "probe accuracy"), tuple(
                (name, *(_pct(value) for value in (view.map_at_r, view.precision_at_1, view.probe_accuracy)))
                for name, view in views.items())),
            Heading(f"The {min(top, len(self.per_class))} classes whose background gives them away most"),
            Table(("class", "images", *(("empty masks",) if flagged else ()), "background MAP@R",
                   "object MAP@R", "chance", "leakage"), tuple(
                (shown_class(row.name, row.label), str(row.images),
                 *((str(row.empty_masks),) if flagged else ()),
                 *(_pct(value) for value in (row.background_map_at_r, row.foreground_map_at_r,
                                             row.chance_map_at_r, row.leakage)))
                for row in self.per_class[:top])),
        ]
        title = Heading(f"Background leakage of {self.dataset} ({self.split})", 1)
        page = to_markdown([title, *blocks], Path())
        if picture is not None:
            page += ("\nThe first classes' background-only images (a row each, named by its AP@R) and their "
                     "nearest background-only neighbours (green: same class, red: other):\n\n"
                     f"![the classes whose background gives them away most]({picture})\n")
        return page

    def write(self, out: str | Path, picture: str | None = None) -> Path:
        """``leakage.json`` and ``leakage.md`` (linking ``picture``, a file in ``out``, where given) in folder
        ``out`` (made where missing); returns it."""
        folder = make_dirs(out)
        write_json_atomic(folder / "leakage.json", self.as_dict())
        write_text_atomic(folder / "leakage.md", self.markdown(picture=picture))
        return folder


def _empty_words(leakage: DatasetLeakage) -> str:
    if not leakage.empty_masks:
        return "Empty saliency masks: none; every image's mask shows an object."
    whole = sum(1 for row in leakage.per_class if row.empty_masks and row.empty_masks == row.images)
    return (f"{leakage.empty_masks} of {leakage.images} images have a saliency mask that shows no object "
            f"({whole} classes entirely; the table counts them per class): their object stays in the "
            "background-only view and their object-only view is black, so they read as background leakage. "
            "They are counted as every image is.")


def _bench_words(bench: BenchEquivalent | None) -> Text:
    if bench is None:
        return ("No bench ρ: the bias dial is calibrated for the default encoder only, with each fill "
                "(docs/leakage.md, \"Calibration on the bias dial\").")
    return ("The bias dial's bench leaks as much at ", Strong(bench.words()), " (the interval's ends read on "
            f"the same curve: the default encoder on the dial's benches with {bench.masks} masks; "
            "docs/leakage.md).")


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
