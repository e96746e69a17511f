"""The audit's page: every model in one table ranked by corrupted MAP@R (why: docs/audit.md), as ``audit.md``,
a self-contained ``audit.html`` (every label and spec shown as text) and ``audit.json`` (every number, each
model's spec, label and folder).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bgbias.fileio import write_json_atomic
from bgbias.measurement.summary import PROFILE_SETS
from bgbias.model_audit.adjacent import AdjacentComparison, comparison_blocks
from bgbias.model_audit.outcome import ModelOutcome
from bgbias.report.document import (
    Block,
    Bullets,
    Code,
    Heading,
    Link,
    Paragraph,
    Strong,
    Table,
    write_document,
)
from bgbias.report.evaluation import percent, percent_spread
from bgbias.saliency.records import MASK_MAKER, shown_mask_maker
from bgbias.schema import format_header

AUDIT_FORMAT = "bgbias-audit"
AUDIT_NAME = "audit"
"""``audit.md``, ``audit.html``, ``audit.json``."""

PROFILE_LEFT_OUT = ("clean", "random-bg", "query-side", "worst-case", "chance")
"""Profile sets the table leaves out: clean and random-bg have columns of their own, the query side and
worst case are in each model's report, and chance is the dataset's (said once, under the table)."""


@dataclass(frozen=True)
class AuditPage:
    """What the page shows: the dataset and split, the settings (with the masks folder and what made its
    masks), and the models ranked."""

    dataset: str
    split: str
    settings: dict[str, Any]
    ranked: tuple[ModelOutcome, ...]
    comparisons: tuple[AdjacentComparison, ...] = ()
    """Each ranked model against the next (:mod:`bgbias.model_audit.adjacent`)."""

    @property
    def failed(self) -> tuple[ModelOutcome, ...]:
        return tuple(outcome for outcome in self.ranked if outcome.status == "failed")


def ranked(outcomes: Sequence[ModelOutcome]) -> tuple[ModelOutcome, ...]:
    """Finished models by corrupted MAP@R, best first, ties (and models without a corrupted score) by label;
    then the failed models by label."""
    def order(outcome: ModelOutcome) -> tuple[int, float, str]:
        score = outcome.scores.corrupted_map_at_r if outcome.scores is not None else None
        group = 0 if outcome.status == "done" and score is not None else 1 if outcome.status == "done" else 2
        return group, -(score or 0.0), outcome.label

    return tuple(sorted(outcomes, key=order))


def profile_columns(outcomes: Sequence[ModelOutcome]) -> list[str]:
    """The profile's sets some model has, in the profile's order, but those of :data:`PROFILE_LEFT_OUT`."""
    present = {name for outcome in outcomes if outcome.scores is not None for name in outcome.scores.profile}
    return [name for name in PROFILE_SETS if name in present and name not in PROFILE_LEFT_OUT]


def _split_drop(outcomes: Sequence[ModelOutcome]) -> bool:
    """Whether some model's drop is split by the paste control (an audit of before it has no split)."""
    return any(outcome.scores is not None and outcome.scores.paste_cost is not None for outcome in outcomes)


def table(page: AuditPage) -> Table:
    """The ranked table: one row per model, its scores, profile and leakage; an ``error`` column where a model
    failed."""
    columns = profile_columns(page.ranked)
    split = _split_drop(page.ranked)
    headers = ["rank", "model", "clean MAP@R", "clean P@1", "corrupted MAP@R", "relative drop (%)",
               *(["paste cost", "background effect"] if split else []), *columns,
               "leakage (%) [95 % interval]"]
    failed = bool(page.failed)
    if failed:
        headers.append("error")
    rows = []
    for rank, outcome in ranks(page.ranked):
        scores = outcome.scores
        if rank is None or scores is None:
            error = outcome.error.splitlines()[0] if outcome.error else ""
            rows.append(("failed", outcome.label, *[""] * (len(headers) - 3), error))
            continue
        cells = [str(rank), outcome.label, percent(scores.clean_map_at_r),
                 percent(scores.clean_precision_at_1),
                 percent_spread(scores.corrupted_map_at_r, scores.corrupted_map_at_r_std),
                 "" if scores.relative_drop is None else f"{100 * scores.relative_drop:.1f}",
                 *((percent(scores.paste_cost), percent(scores.background_effect)) if split else ()),
                 *(percent(scores.profile.get(name)) for name in columns),
                 _leakage(scores.leakage, scores.leakage_interval)]
        rows.append(tuple(cells + ([""] if failed else [])))
    return Table(tuple(headers), tuple(rows), caption=f"ranked by corrupted MAP@R; MAP@R and P@1 in %, "
                                                      f"{page.settings['repeats']} corrupted repeats")


def blocks(page: AuditPage) -> list[Block]:
    """The page's blocks: the table, what its columns mean, and each model's folder and reports."""
    chance = next((outcome.scores.chance_map_at_r for outcome in page.ranked if outcome.scores is not None
                   and outcome.scores.chance_map_at_r is not None), None)
    settings = page.settings
    return [
        Paragraph(f"{_models(page)} on the {page.split} split of {page.dataset}: "
                  f"{settings['repeats']} corrupted repeats (seed {settings['seed']}), the "
                  "background-reliance profile, and the dataset's background leakage seen through each "
                  f"model (hole filled: {settings['fill']})."
                  + (f" Split scored: {settings['split_reason']}." if settings.get("split_reason") else "")),
        Paragraph(("Masks: ", Code(settings["masks"]), f" ({shown_mask_maker(settings[MASK_MAKER])}).")),
        table(page),
        *_empty_mask_note(page),
        Bullets(_column_notes(chance)),
        *([Heading("Is each model really ahead of the next?"), *comparison_blocks(page.comparisons)]
          if page.comparisons else []),
        Heading("Models"),
        Bullets(tuple(_model_item(outcome) for outcome in page.ranked)),
        *([Heading("Failed models"),
           Paragraph(("Each is left out of the ranking; running the same ", Code("bgbias audit"),
                      " again tries it again and keeps the finished ones. Its traceback is in its folder's ",
                      Code("audit-model.json"), ".")),
           Bullets(tuple((f"{outcome.label}: ", Code(outcome.spec), f": {outcome.error}")
                         for outcome in page.failed))] if page.failed else []),
    ]


def _empty_mask_note(page: AuditPage) -> list[Block]:
    """How many of the split's images have a mask that shows no object, where any has: every model's
    corrupted score counts them, though their corrupted copy is background alone."""
    counted = [outcome.scores for outcome in page.ranked
               if outcome.scores is not None and outcome.scores.empty_masks]
    if not counted:
        return []
    scores = max(counted, key=lambda scores: scores.empty_masks or 0)
    return [Paragraph((Strong(f"{scores.empty_masks} of {scores.images} images of the split have a saliency "
                              "mask that shows no object"),
                       ": their corrupted copy is the new background alone, and every corrupted score above "
                       "counts them. Each model's evaluation report names them, counts them per class and "
                       "gives its scores without them."))]


def _column_notes(chance: float | None) -> tuple[str, ...]:
    return (
        "Ranked by corrupted MAP@R: what a retrieval system keeps when the backgrounds of its images change "
        "(ties by label).",
        "clean: MAP@R and P@1 on the split as it is; corrupted: MAP@R with every image's background "
        "replaced by a photo of the test pool, mean ± std over the repeats; relative drop: (clean − "
        "corrupted) / clean.",
        "paste cost: clean − repasted MAP@R (points), what compositing the object back onto its own "
        "background through its mask costs; background effect: repasted − corrupted, what the new "
        "backgrounds cost beyond it (each model's evaluation report gives both with intervals and p-values).",
        "repasted: the paste control, the object on its own (inpainted) background; "
        "only-fg: the object alone on black; only-bg-*: the object removed, the hole filled as named; "
        "mixed-same / mixed-rand: the object on the background of another image of its class / of another "
        "class; bg-gap: mixed-same − mixed-rand (points). Each set scored against itself, MAP@R"
        + (f"; a random ranking scores {percent(chance)}." if chance is not None else "."),
        "leakage: the background's share of what the background-only and object-only views of the split "
        "retrieve above chance, seen through the model, with its 95 % bootstrap interval (docs/leakage.md).",
    )


def _model_item(outcome: ModelOutcome) -> tuple[Any, ...]:
    """A model's line: its label and spec, then its folder, evaluation report and leakage record, each
    linked where it lies in the audit's folder (a run's report lies in the run's folder: named instead)."""
    spans: list[Any] = [f"{outcome.label}: ", Code(outcome.spec)]
    report = None if outcome.report is None else f"{outcome.report}/report.md"
    leakage = None if outcome.leakage_record is None else outcome.leakage_record.removesuffix(".json") + ".md"
    for name, path in (("folder", outcome.folder), ("evaluation report", report), ("leakage", leakage)):
        if path is not None:
            spans += [", ", Code(f"{name} {path}") if Path(path).is_absolute() else Link(name, path)]
    return tuple(spans)


def _models(page: AuditPage) -> str:
    return "1 model" if len(page.ranked) == 1 else f"{len(page.ranked)} models"


def write_audit_page(page: AuditPage, out: Path) -> dict[str, Path]:
    """``audit.md``, ``audit.html`` and ``audit.json`` in ``out``, each atomically."""
    title = f"Audit of {_models(page)} on {page.dataset} ({page.split})"
    files = write_document(blocks(page), out, AUDIT_NAME, title)
    files["audit_json"] = out / f"{AUDIT_NAME}.json"
    write_json_atomic(files["audit_json"], {
        **format_header(AUDIT_FORMAT), "dataset": page.dataset, "split": page.split,
        "settings": page.settings,
        "ranking": "corrupted MAP@R, best first; ties by label; failed models last",
        "models": [{"rank": rank, **outcome.model_dump(mode="json", exclude={"traceback"})}
                   for rank, outcome in ranks(page.ranked)],
        "adjacent_ranks": [pair.model_dump(mode="json") for pair in page.comparisons],
    })
    return files


def ranks(outcomes: Sequence[ModelOutcome]) -> list[tuple[int | None, ModelOutcome]]:
    """Each outcome (ranked) with its rank on the page: None for a failed model."""
    ranks, rank = [], 0
    for outcome in outcomes:
        if outcome.status == "done" and outcome.scores is not None:
            rank += 1
            ranks.append((rank, outcome))
        else:
            ranks.append((None, outcome))
    return ranks


def _leakage(value: float | None, interval: Sequence[float | None]) -> str:
    if value is None:
        return "–"
    low, high = interval
    bounds = "" if low is None or high is None else f" [{100 * low:.1f}, {100 * high:.1f}]"
    return f"{100 * value:.1f}{bounds}"
