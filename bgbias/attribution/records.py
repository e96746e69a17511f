"""The ledger of an explain run (``records.jsonl``): a settings header, then one JSON line per scored image.
The header names everything that changes the numbers (weights, attribution and options, seed, geometry,
images, masks), so a re-run resumes only into results it would itself have produced. Reading, appending,
rewriting and claiming are :mod:`bgbias.ledger`'s.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from bgbias.errors import RecordError, given
from bgbias.ledger import Ledger, differing_keys
from bgbias.schema import Record, check_format, check_record, format_header

RECORDS_NAME = "records.jsonl"
EXPLAIN_AGAIN = "explain the model again (`bgbias explain ... --force` starts its explanation over)"
"""The fix of an explanation's file that cannot be read back."""
GROUND_TRUTH, SALIENCY = "ground_truth", "saliency"
MASK_SOURCES = (GROUND_TRUTH, SALIENCY)
"""Where an image's mask comes from: the dataset's own mask, or the U²-Net saliency mask."""


class ScoreLine(Record):
    """A ledger line as :meth:`ImageScore.to_json` writes it (``None``: undefined); ``reference`` and
    ``reference_label`` come together or not at all."""

    id: str
    label: int
    mask_source: Literal["ground_truth", "saliency"]
    foreground_fraction: float | None
    attribution_on_foreground: float | None
    score: float | None
    reference: str | None = None
    reference_label: int | None = None


class ExplainSettings(Record):
    """The ledger header's settings as a reader of finished results needs them: where the saliency masks
    the scores were made against lie (``None``: every image had its ground-truth mask)."""

    dataset: str
    attribution: str
    masks_dir: str | None


class SettingsHeader(Record):
    settings: ExplainSettings


@dataclass(frozen=True)
class ImageScore:
    """The score of one image and its two ingredients (NaN where undefined); for an attribution that explains
    each image against a reference image, that image's id and label (else None, and left out of the line)."""

    id: str
    label: int
    mask_source: str
    foreground_fraction: float
    attribution_on_foreground: float
    score: float
    reference: str | None = None
    reference_label: int | None = None

    def to_json(self) -> dict[str, Any]:
        line = {key: _number(value) if key in _NUMBERS else value
                for key, value in dataclasses.asdict(self).items()}
        if self.reference is None:
            del line["reference"], line["reference_label"]
        return line

    @classmethod
    def from_json(cls, data: Any) -> ImageScore | None:
        """The score a ledger line holds, or ``None`` for a line that is not one (:class:`ScoreLine`): such a
        line is skipped like a torn one, and its image scored again."""
        try:
            line = ScoreLine.model_validate(data)
        except ValidationError:
            return None
        if (line.reference is None) != (line.reference_label is None):
            return None
        return cls(**{key: _float(getattr(line, key)) if key in _NUMBERS else getattr(line, key)
                      for key in ScoreLine.model_fields})


_NUMBERS = ("foreground_fraction", "attribution_on_foreground", "score")
"""The fields of a score that are NaN where undefined (``null`` in the ledger)."""


LEDGER_FORMAT = "bgbias-explain-ledger"


def ledger_header(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The first line: its format and the settings every score of the folder was made with."""
    return {**format_header(LEDGER_FORMAT), "settings": settings}


SCORE_LEDGER: Ledger[ImageScore] = Ledger(ImageScore.to_json, ImageScore.from_json, file_format=LEDGER_FORMAT)
"""``records.jsonl``: the header of :func:`ledger_header`, then :class:`ImageScore` lines."""


def claim_out_dir(out_dir: Path, settings: Mapping[str, Any], force: bool) -> dict[str, ImageScore]:
    """The scores already in ``out_dir`` for these ``settings`` (by id), ready to be appended to.

    A ledger of other settings, or a non-empty folder without a ledger, is an ``OptionError`` unless
    ``force``, which starts a fresh ledger.
    """
    return SCORE_LEDGER.claim(
        Path(out_dir) / RECORDS_NAME,
        ledger_header(settings),
        force=force,
        other=lambda header: _other_settings(header, settings),
        foreign=_NO_RESULTS,
        fix=f"pass another output folder, or {given(True)} to discard them and start over",
        foreign_fix=f"pass a new or empty output folder, or {given(True)} to write into this one",
    )


def read_results(out_dir: Path) -> tuple[ExplainSettings, dict[str, ImageScore]]:
    """The settings and scores (by image id) of a finished explanation in ``out_dir``; a ledger that is
    missing or whose header is not one is a ``RecordError``."""
    path = Path(out_dir) / RECORDS_NAME
    read = SCORE_LEDGER.read(path)
    if read is None:
        raise RecordError("the explanation's ledger is missing or its header is damaged", path=path,
                          fix=EXPLAIN_AGAIN)
    header, scores = read
    what = "the explanation's ledger header"
    check_format(header, LEDGER_FORMAT, path=path, what=what, fix=EXPLAIN_AGAIN)
    checked = check_record(header, SettingsHeader, path=path, what=what, fix=EXPLAIN_AGAIN)
    return checked.settings, scores


def write_ledger(path: Path, settings: Mapping[str, Any], scores: Sequence[ImageScore]) -> None:
    """Rewrite a ledger atomically: the header, then the scores in the given order (the canonical form)."""
    SCORE_LEDGER.write(path, scores, header=ledger_header(settings))


def normalised_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` as they read back from JSON (tuples become lists), so a fresh dict compares equal to a
    stored one."""
    return json.loads(json.dumps(settings, sort_keys=True))


_NO_RESULTS = "the output folder is not empty and holds no explain results"


def _other_settings(header: Any, settings: Mapping[str, Any]) -> str:
    """Why a folder whose ledger starts with ``header`` is refused: the settings that differ, or that it is
    no explain ledger at all."""
    old = header.get("settings") if isinstance(header, dict) else None
    if not isinstance(old, dict):
        return _NO_RESULTS
    differing = ", ".join(differing_keys(old, settings))
    return f"the output folder holds explain results made with other settings ({differing})"


def _number(value: float) -> float | None:
    """JSON has no NaN: undefined values are stored as null."""
    return None if math.isnan(value) else value


def _float(value: float | None) -> float:
    return float("nan") if value is None else float(value)
