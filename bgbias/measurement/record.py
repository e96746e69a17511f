"""The typed record of one evaluation, ``report.json``'s declared shape (:mod:`bgbias.schema`): clean vs
corrupted retrieval scores, their drop, who suffers most and the profile, with the evaluation's metadata.
``report.json`` is its own dump; values that do not exist are ``None`` (JSON has no NaN).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from bgbias.installation import InstallationRecord
from bgbias.measurement.decomposition import MetricDecomposition
from bgbias.measurement.intervals import Interval, IntervalSettings, PairedDifference
from bgbias.saliency.records import MaskMaker, shown_mask_maker
from bgbias.schema import Record, check_record, field_problem

REPORT_FORMAT = "bgbias-eval-report"

COMPUTED_KEYS = frozenset(
    {"format", "version", "images", "classes", "scored", "clean", "corrupted", "drop", "per_class",
     "images_hurt_most", "profile", "empty_masks", "mask_sensitivity", "confidence", "intervals"}
)
"""The report's own fields, computed from the scores: metadata may not use these keys."""

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
    name: str | None = None
    images: int
    empty_masks: int | None = None  # its images whose mask shows no object; None: not checked
    clean_map_at_r: float | None
    corrupted_map_at_r: float | None
    drop: float | None
    relative_drop: float | None
    drop_interval: Interval | None = None  # over its queries, paired; only the classes the report shows



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
    """A profile row: its mean and std over its sets (the spread over background draws alone), and per
    metric its interval over the queries and those draws (None for chance, which has no per-query scores;
    for the BG-gap the paired difference's, with its ``p_value`` of no gap)."""

    set: str
    title: str
    repeats: int
    mean: Scores
    std: Scores
    interval: dict[str, Interval | None] | None = None
    p_value: dict[str, float | None] | None = None


class Confidence(Record):
    """How sure the headline is, per metric (the keys of :data:`~bgbias.retrieval.metrics.METRICS`): the
    clean score's interval over the queries, the corrupted one's over the queries and the repeats, and the
    drop (clean − corrupted) paired by query, with its p-value; the last two None without corrupted sets."""

    clean: dict[str, Interval | None]
    corrupted: dict[str, Interval | None] | None = None
    drop: dict[str, PairedDifference | None] | None = None


class Profile(Record):
    sets: list[ProfileSet]
    worst_k: int
    only_fg_fill: list[int]
    decomposition: dict[str, MetricDecomposition] | None = None
    """Per metric, the drop split by the paste control into paste cost and background effect
    (:mod:`bgbias.measurement.decomposition`); None in a report made before the control existed."""


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
    what made them."""

    masks: str
    mask_maker: MaskMaker | None

    def words(self) -> str:
        """What made the masks, as a page says it."""
        return shown_mask_maker(None if self.mask_maker is None else self.mask_maker.model_dump())


class ImageAgreement(Record):
    id: str
    iou: float


class MaskAgreement(Record):
    """How far two sources' masks agree over the scored split's images: the IoU of their foregrounds (8-bit
    value ≥ 128) per image at the evaluation crop, 1 where both are empty; the images that agree least."""

    images: int
    mean: float
    median: float
    worst: float
    worst_images: list[ImageAgreement]


class MaskSensitivity(Record):
    """The paper's corrupted repeats cut out with a second source's masks (``second``), from the same
    manifests: their scores, per metric the paired difference second − first (the queries paired, and the
    draws: the same backgrounds), and how far the two sources' masks agree."""

    first: UsedMasks
    second: UsedMasks
    corrupted: CorruptedScores
    difference: dict[str, PairedDifference | None]
    agreement: MaskAgreement


class EvaluationReport(Record):
    """``report.json`` as the tables, plots and pages read it (:mod:`bgbias.schema`); the model's description
    and the setup ride along unchecked (``model_extra``), since only ``report.md`` shows them, as text.
    Fields an evaluation from embeddings or the API does not set are ``None`` (or empty)."""

    format: Literal["bgbias-eval-report"]
    version: int
    method: str
    bgaugment: bool | None = None  # a model bgbias neither trained nor described has no setting
    dataset: str
    measured: str | None = None
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
    mask_sensitivity: MaskSensitivity | None = None  # None: no second masks asked for
    confidence: Confidence | None = None  # None: a report from before the intervals
    intervals: IntervalSettings | None = None  # how the intervals were made
    approximate: bool = False
    retrieval: str | None = None  # how the images were ranked
    shortlist_recall: ShortlistRecall | None = None
    installation: InstallationRecord | None = None
    split_reason: str | None = None  # which split was scored and why

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
                if key not in COMPUTED_KEYS | {"method", "dataset", "split"}}

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
        if field is None or key in COMPUTED_KEYS:
            continue
        problem = field_problem(value, field.annotation)
        if problem is not None:
            where, wanted, found = problem
            inside = "" if not where else where if where.startswith("[") else f".{where}"
            return f"{key}{inside}", wanted, found
    return None

def run_label(method: str, bgaugment: bool) -> str:
    """How tables and plots name a run: ``"method"`` or ``"method + BGAugment"``."""
    return f"{method} + BGAugment" if bgaugment else method
