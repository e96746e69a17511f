"""What an audit found for one model, as its folder's ``audit-model.json`` keeps it: the numbers the page
shows, where the model's reports are, and the key of what determined them, by which a later audit reuses
a finished model instead of measuring it again; or the error it failed with."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from bgbias.fileio import write_json_atomic
from bgbias.schema import FORMAT_VERSION, Record, read_record

OUTCOME_FILE = "audit-model.json"
OUTCOME_FORMAT = "bgbias-audit-model"


class AuditScores(Record):
    """One model's numbers (fractions; None where undefined): clean and corrupted scores, the drop, the
    profile's MAP@R by set, the drop's MAP@R split into paste cost and background effect (None: an audit of
    before the paste control) and the dataset's leakage through the model, with how many images were scored
    and how many have an empty mask (None: not checked)."""

    clean_map_at_r: float | None
    clean_precision_at_1: float | None
    corrupted_map_at_r: float | None
    corrupted_map_at_r_std: float | None
    corrupted_repeats: int
    relative_drop: float | None
    profile: dict[str, float | None]
    paste_cost: float | None = None
    background_effect: float | None = None
    leakage: float | None
    leakage_interval: list[float | None]
    background_map_at_r: float | None
    foreground_map_at_r: float | None
    chance_map_at_r: float | None
    images: int
    empty_masks: int | None


class ModelOutcome(Record):
    """One model of the audit: its label and spec as given, its folder (relative to the audit's), and either
    its scores and reports (``status`` ``done``) or its error (``failed``)."""

    format: Literal["bgbias-audit-model"] = OUTCOME_FORMAT
    version: Literal[1] = FORMAT_VERSION
    label: str
    spec: str
    args: dict[str, Any]
    folder: str
    status: Literal["done", "failed"]
    key: str | None = None
    """sha256 of what determined the scores (the model's fingerprint, the data and the settings)."""
    model: dict[str, Any] | None = None
    report: str | None = None
    """The evaluation's report folder: relative to the audit's folder where it lies inside, else as is."""
    leakage_record: str | None = None
    scores: AuditScores | None = None
    error: str | None = None
    traceback: str | None = None


def write_outcome(folder: Path, outcome: ModelOutcome) -> Path:
    """``audit-model.json`` in the model's ``folder``, atomically."""
    path = folder / OUTCOME_FILE
    write_json_atomic(path, outcome.model_dump(mode="json"))
    return path


def read_outcome(folder: Path) -> ModelOutcome | None:
    """The outcome an earlier audit left in ``folder``, or None where there is none; a damaged one is a
    ``RecordError`` naming it."""
    path = folder / OUTCOME_FILE
    if not path.is_file():
        return None
    return read_record(path, ModelOutcome, what="the audit's record of this model",
                       file_format=OUTCOME_FORMAT,
                       fix="delete the model's folder and re-run `bgbias audit`: it measures the model again")

