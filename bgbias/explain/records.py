"""The ledger of an explain run (``records.jsonl``): a settings header, then one JSON line per scored image.

Attribution maps cost a backward pass through dozens of noisy copies per image, so a long run must survive
being killed. Lines are appended and flushed as images finish; a torn last line is ignored on reading. The
header names everything that changes the numbers (model weights, attribution and its options, seed,
geometry, images, masks), so a re-run resumes only into results it would itself have produced. At the end
the file is rewritten atomically in item order, so a resumed run ends with the same bytes as an
uninterrupted one.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from bgbias.errors import OptionError
from bgbias.fileio import reporting_write_errors, write_text_atomic

if TYPE_CHECKING:
    from torch import nn

RECORDS_NAME = "records.jsonl"
GROUND_TRUTH, SALIENCY = "ground_truth", "saliency"
MASK_SOURCES = (GROUND_TRUTH, SALIENCY)
"""Where an image's mask comes from: the dataset's own mask, or the U²-Net saliency mask."""


@dataclass(frozen=True)
class ImageScore:
    """The score of one image and its two ingredients (NaN where undefined)."""

    id: str
    label: int
    mask_source: str
    foreground_fraction: float
    attribution_on_foreground: float
    score: float

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "label": self.label,
            "mask_source": self.mask_source,
            "foreground_fraction": _number(self.foreground_fraction),
            "attribution_on_foreground": _number(self.attribution_on_foreground),
            "score": _number(self.score),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ImageScore:
        return cls(
            id=str(data["id"]),
            label=int(data["label"]),
            mask_source=str(data["mask_source"]),
            foreground_fraction=_float(data["foreground_fraction"]),
            attribution_on_foreground=_float(data["attribution_on_foreground"]),
            score=_float(data["score"]),
        )


def model_sha256(model: nn.Module) -> str:
    """Checksum of a model's state (names, dtypes, shapes and bytes), so results of other weights are never
    resumed into."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}|{flat.dtype}|{tuple(tensor.shape)}\n".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def claim_out_dir(out_dir: Path, settings: Mapping[str, Any], force: bool) -> dict[str, ImageScore]:
    """The scores already in ``out_dir`` for these ``settings`` (by id), ready to be appended to.

    A ledger of other settings, or a non-empty folder without a ledger, is an ``OptionError`` unless
    ``force``, which starts a fresh ledger.
    """
    path = Path(out_dir) / RECORDS_NAME
    if not force:
        previous = read_ledger(path)
        if previous is not None:
            old_settings, scores = previous
            if old_settings == settings:
                return scores
            keys = {*settings, *old_settings}
            differing = sorted(key for key in keys if settings.get(key) != old_settings.get(key))
            raise OptionError(
                f"the output folder holds explain results made with other settings ({', '.join(differing)})",
                path=path,
                fix="pass another output folder, or --force (force=True) to discard them and start over",
            )
        if Path(out_dir).is_dir() and any(Path(out_dir).iterdir()):
            raise OptionError(
                "the output folder is not empty and holds no explain results",
                path=out_dir,
                fix="pass a new or empty output folder, or --force (force=True) to write into this one",
            )
    write_text_atomic(path, _header(settings))
    return {}


def read_ledger(path: Path) -> tuple[dict[str, Any], dict[str, ImageScore]] | None:
    """``(settings, scores by id)`` of a ledger (a later line wins, torn lines are skipped); ``None`` when the
    file is missing or does not start with a settings header."""
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return None
    try:
        header = json.loads(lines[0])
        settings = header["settings"]
    except (IndexError, ValueError, KeyError, TypeError):
        return None
    scores: dict[str, ImageScore] = {}
    for line in lines[1:]:
        try:
            score = ImageScore.from_json(json.loads(line))
        except (ValueError, KeyError, TypeError):
            continue
        scores[score.id] = score
    return settings, scores


def write_ledger(path: Path, settings: Mapping[str, Any], scores: Sequence[ImageScore]) -> None:
    """Rewrite a ledger atomically: the header, then the scores in the given order (the canonical form)."""
    write_text_atomic(path, _header(settings) + "".join(_line(score) for score in scores))


class ScoreLog:
    """Append-only writer of a ledger's score lines; each line is flushed as soon as it is written."""

    def __init__(self, path: Path):
        with reporting_write_errors(path):
            self._handle: TextIO = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed by close())

    def append(self, score: ImageScore) -> None:
        self._handle.write(_line(score))
        self._handle.flush()

    def close(self) -> None:
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()

    def __enter__(self) -> ScoreLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def normalised_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` as they read back from JSON (tuples become lists), so a fresh dict compares equal to a
    stored one."""
    return json.loads(json.dumps(settings, sort_keys=True))


def _header(settings: Mapping[str, Any]) -> str:
    return json.dumps({"settings": settings}, sort_keys=True) + "\n"


def _line(score: ImageScore) -> str:
    return json.dumps(score.to_json(), sort_keys=True) + "\n"


def _number(value: float) -> float | None:
    """JSON has no NaN: undefined values are stored as null."""
    return None if math.isnan(value) else value


def _float(value: float | None) -> float:
    return float("nan") if value is None else float(value)
