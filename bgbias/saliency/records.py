"""What a mask run leaves beside the masks: a per-shard record file (one JSON line per image, by
:mod:`bgbias.ledger`: appended during a run, rewritten in id order at its end) and a manifest derived from the
records alone, so a resumed run ends with the same bytes as an uninterrupted one. A record names the sha256 of
the image it was made from, so a mask of a since-replaced image is made again.

Two locks: one per shard record file, for the whole run (a second run of the shard would rewrite the file
under the first one's appends), and a short one around deriving the manifest (shards run at once).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, TypeAdapter, ValidationError

from bgbias import __version__
from bgbias.assets.digest import sha256_file
from bgbias.data.items import Item
from bgbias.errors import BgbiasError, BusyError, OptionError, RecordError
from bgbias.fileio import exclusive_lock, write_json_atomic
from bgbias.ledger import Ledger, differing_keys
from bgbias.saliency.quality import Agreement
from bgbias.saliency.sessions import AMP_OF, ModelInfo
from bgbias.schema import Record, format_header, read_record

RECORDS_DIR = "records"
MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "bgbias-masks"
MANIFEST_LOCK = "manifest.lock"
"""In ``records/``: held while the manifest and quality report are derived from the record files."""


class AgreementLine(Record):
    iou: float | None = None
    overlap: float | None = None
    error: str | None = None


class MaskLine(Record):
    """A made mask's ledger line as :meth:`MaskRecord.to_json` writes it."""

    id: str
    status: Literal["ok"]
    size: Annotated[list[int], Field(min_length=2, max_length=2)]
    image_sha256: str
    raw_min: float | None = None
    raw_max: float | None = None
    empty: bool | None = None
    quality: AgreementLine | None = None
    truth_sha256: str | None = None


class FailureLine(Record):
    id: str
    status: Literal["failed"]
    error: str | None
    fix: str | None


_LEDGER_LINE: TypeAdapter[MaskLine | FailureLine] = TypeAdapter(MaskLine | FailureLine)
"""A shard's ledger line: a made mask or a failure."""


@dataclass(frozen=True)
class MaskRecord:
    """The outcome for one image: a mask (with the sha256 of the image and ground truth it was made from) or
    a failure with the reason and the fix."""

    id: str
    ok: bool
    size: tuple[int, int] | None = None
    raw_min: float | None = None
    raw_max: float | None = None
    empty: bool | None = None
    quality: Agreement | None = None
    error: str | None = None
    fix: str | None = None
    image_sha256: str | None = None  # None for a failure
    truth_sha256: str | None = None  # None also where the ground truth could not be read

    @classmethod
    def failure(cls, image_id: str, err: BgbiasError) -> MaskRecord:
        return cls(image_id, ok=False, error=err.problem, fix=err.fix)

    def to_json(self) -> dict[str, Any]:
        if not self.ok:
            return {"id": self.id, "status": "failed", "error": self.error, "fix": self.fix}
        data: dict[str, Any] = {"id": self.id, "status": "ok", "size": list(self.size or ()),
                                "image_sha256": self.image_sha256}
        if self.raw_max is not None:
            data.update(raw_min=self.raw_min, raw_max=self.raw_max, empty=self.empty)
        if self.quality is not None:
            data.update(quality=self.quality.to_json(), truth_sha256=self.truth_sha256)
        return data

    @classmethod
    def from_json(cls, data: Any) -> MaskRecord | None:
        """The record a ledger line holds, or ``None`` for a line that is not one (its mask is made again)."""
        try:
            line = _LEDGER_LINE.validate_python(data)
        except ValidationError:
            return None
        if isinstance(line, FailureLine):
            return cls(line.id, ok=False, error=line.error, fix=line.fix)
        width, height = line.size
        quality = line.quality
        agreement = None if quality is None else Agreement(quality.iou, quality.overlap, quality.error)
        return cls(line.id, ok=True, size=(width, height), raw_min=line.raw_min, raw_max=line.raw_max,
                   empty=line.empty, quality=agreement, image_sha256=line.image_sha256,
                   truth_sha256=line.truth_sha256)


def records_path(out_dir: Path, shard: tuple[int, int]) -> Path:
    """The record file of ``shard`` = (index, count): each shard writes its own, so shards never clash."""
    index, count = shard
    return Path(out_dir) / RECORDS_DIR / f"shard-{index}-of-{count}.jsonl"


@contextmanager
def shard_lock(out_dir: Path, shard: tuple[int, int]) -> Iterator[None]:
    """Hold ``shard``'s record file for a whole run; ``BusyError`` at once if another process holds it."""
    path = records_path(out_dir, shard).with_suffix(".lock")
    index, count = shard
    busy = BusyError(
        f"another bgbias masks process is writing shard {index}/{count} of {out_dir}", path=path,
        fix="wait for it to finish, or pass another --out (other shards may run at the same time)")
    with exclusive_lock(path, wait=False, busy=busy):
        yield


@contextmanager
def manifest_lock(out_dir: Path) -> Iterator[None]:
    """Hold the folder's manifest while it is derived from the record files (waits for another holder: each
    holds it for one read of the records and two small writes)."""
    with exclusive_lock(Path(out_dir) / RECORDS_DIR / MANIFEST_LOCK, wait=True):
        yield


def record_files(out_dir: Path) -> list[Path]:
    folder = Path(out_dir) / RECORDS_DIR
    return sorted(folder.glob("shard-*-of-*.jsonl")) if folder.is_dir() else []


MASK_LEDGER: Ledger[MaskRecord] = Ledger(MaskRecord.to_json, MaskRecord.from_json)
"""A shard's record file: no header (the manifest holds the settings), one JSON line per image, the later
line of an id winning."""


def read_all_records(out_dir: Path) -> dict[str, MaskRecord]:
    """The records of every shard file of ``out_dir`` merged by id: a mask beats a failure (another shard
    layout may have retried it), otherwise the file later in name order wins."""
    merged: dict[str, MaskRecord] = {}
    for path in record_files(out_dir):
        for image_id, record in MASK_LEDGER.read_records(path).items():
            previous = merged.get(image_id)
            if previous is None or record.ok or not previous.ok:
                merged[image_id] = record
    return merged


def stale_masks(items: Sequence[Item], out_dir: Path) -> list[Item]:
    """The items whose mask in ``out_dir`` was made from other bytes than their image file holds now (items
    without a record, e.g. masks a user brought, cannot be checked and are not listed)."""
    records = read_all_records(out_dir)
    recorded = [(item, records[item.id].image_sha256) for item in items
                if item.id in records and records[item.id].ok and records[item.id].image_sha256]
    with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:  # hashlib releases the GIL
        digests = list(pool.map(lambda pair: sha256_file(pair[0].image), recorded))
    return [item for (item, expected), digest in zip(recorded, digests, strict=True) if digest != expected]


def write_records(path: Path, records: Iterable[MaskRecord]) -> None:
    """Rewrite a record file atomically, one line per image in id order (the canonical form)."""
    MASK_LEDGER.write(path, sorted(records, key=lambda record: record.id))


def mask_settings(info: ModelInfo, empty_below: float) -> dict[str, Any]:
    """What must be the same for masks to share a folder: the model file, the backend and precision (their
    masks differ in a few pixel values) and the empty threshold."""
    return {"model": info.name, "md5": info.md5, "sha256": info.sha256, "backend": info.backend,
            "precision": info.precision, "empty_below": empty_below}


def folder_settings(out_dir: Path) -> dict[str, Any] | None:
    """The settings the masks of ``out_dir`` were made with (``None`` where it has none yet)."""
    manifest = read_manifest(out_dir)
    return None if manifest is None else manifest.settings.model_dump()


Shown = Annotated[str, StringConstraints(max_length=200)]
"""A manifest's string as a report quotes it: a name, never a page's worth of text."""


class MakerSettings(Record):
    model: Shown
    backend: Shown
    precision: Shown


class MakerInference(Record):
    provider: Shown | None = None


class MaskManifest(Record):
    """``manifest.json`` as a later ``bgbias masks`` and reports read it back: the settings the masks were
    made with, what ran the model (:func:`mask_maker`); the rest rides along."""

    settings: MakerSettings
    inference: MakerInference


MASK_MAKER = "mask_maker"
"""The key a report records :func:`mask_maker`'s answer under, beside the masks folder."""


class MaskMaker(Record):
    """:func:`mask_maker`'s answer as a report reads it back."""

    model: str | None = None
    backend: str | None = None
    precision: str | None = None
    provider: str | None = None
    error: str | None = None


def mask_maker(out_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """What made the masks of ``out_dir`` (model, backend, precision, provider), for reports to record.
    ``None`` without a manifest (a user's own masks); a damaged one gives ``{"error": why}``: a report must
    not fail over a summary it only quotes."""
    try:
        manifest = read_manifest(Path(out_dir))
    except RecordError as error:
        return {"error": f"{error.path}: {error.problem}"}
    if manifest is None:
        return None
    settings = manifest.settings
    return {"model": settings.model, "backend": settings.backend, "precision": settings.precision,
            "provider": manifest.inference.provider}


def masks_record(folder: str | os.PathLike[str] | None) -> dict[str, Any]:
    """``masks`` and ``mask_maker`` as a result's record holds them; both ``None`` where it used none."""
    if folder is None:
        return {"masks": None, MASK_MAKER: None}
    return {"masks": os.fspath(folder), MASK_MAKER: mask_maker(folder)}


def shown_mask_maker(maker: Mapping[str, Any] | None) -> str:
    """:func:`mask_maker`'s answer as pages and the console show it: ``u2netp, torch fp32 on cpu``."""
    if maker is None:
        return "no bgbias masks manifest (the dataset's own masks, or a user's)"
    if maker.get("error") is not None or maker.get("model") is None:
        return f"unknown: {maker.get('error') or 'the record names no model'}"
    made = f"{maker['model']}, {maker.get('backend')} {maker.get('precision')}"
    return f"{made} on {maker['provider']}" if maker.get("provider") else made


def build_manifest(image_ids: Sequence[str], records: Mapping[str, MaskRecord], info: ModelInfo,
                   empty_below: float, files: Sequence[str]) -> dict[str, Any]:
    """The folder's manifest, from the records of ``image_ids`` only, no clock or host: equal records, equal
    bytes."""
    present = [records[image_id] for image_id in image_ids if image_id in records]
    masks = [record for record in present if record.ok]
    failures = [record for record in present if not record.ok]
    return {
        **format_header(MANIFEST_FORMAT),
        "producer": {"bgbias": __version__, **dict(info.versions)},
        "model": {"name": info.name, "file": info.file.name, "bytes": info.bytes, "md5": info.md5,
                  "sha256": info.sha256},
        "inference": {"backend": info.backend, "provider": info.provider, "precision": info.precision,
                      "batch": info.batch, "streams": info.streams, "threads": info.threads},
        "settings": mask_settings(info, empty_below),
        "masks": "8-bit PNG at the image's size, in the orientation load_image gives (EXIF applied); "
        "u2net family: min-max normalised per image, as rembg only_mask",
        "counts": {"images": len(image_ids), "masks": len(masks), "failed": len(failures),
                   "missing": len(image_ids) - len(present), "empty": sum(1 for r in masks if r.empty)},
        "failures": [{"id": r.id, "error": r.error, "fix": r.fix}
                     for r in sorted(failures, key=lambda r: r.id)],
        "records": list(files),
    }


def read_manifest(out_dir: Path) -> MaskManifest | None:
    """The folder's mask manifest, None where there is none; a damaged one is a ``RecordError``."""
    path = Path(out_dir) / MANIFEST_NAME
    if not path.is_file():
        return None
    return read_record(path, MaskManifest, what="the mask manifest", file_format=MANIFEST_FORMAT,
                       fix="delete it and re-run `bgbias masks` (it rebuilds the manifest from records/), or "
                           "choose another output folder")


def check_settings(out_dir: Path, settings: Mapping[str, Any]) -> None:
    """Refuse to add masks of other settings (:func:`mask_settings`) to a folder that holds masks."""
    previous = folder_settings(out_dir)
    if previous is None or previous == dict(settings):
        return
    differ = sorted(differing_keys(previous, settings), key=lambda key: key != "model")  # the model first
    said = "; ".join(f"{key}: {previous.get(key)!r} there, {settings.get(key)!r} now" for key in differ)
    folder = Path(out_dir)
    if previous.get("model") != settings.get("model"):
        beside = folder.with_name(f"{folder.name}-{previous.get('model')}")
        raise OptionError(
            f"this folder holds {previous.get('model')} masks, not {settings.get('model')} ones ({said})",
            path=folder / MANIFEST_NAME,
            fix=f"each mask model has a folder of its own: move this one to {beside} (where `bgbias masks "
                f"--model {previous.get('model')}` puts them by default) and run again, or pass --out DIR, "
                f"or --model {previous.get('model')} to go on with it")
    # The command-line options, with the folder's values, that set those of the differing keys an option sets.
    options = {"backend": ("--backend", previous.get("backend")),
               "precision": ("--amp", AMP_OF.get(previous.get("precision"), previous.get("precision"))),
               "empty_below": ("--empty-below", previous.get("empty_below"))}
    same = " ".join(f"{flag} {value}" for key, (flag, value) in options.items() if key in differ)
    raise OptionError(
        f"the masks in this folder were made with other settings ({said})", path=folder / MANIFEST_NAME,
        fix=(f"pass {same} to go on with it" if same else "use the model file its masks were made with")
            + " (--backend auto and --amp auto go on with the folder's), choose another output folder, or "
              "delete this one")


def write_manifest(out_dir: Path, manifest: Mapping[str, Any]) -> Path:
    path = Path(out_dir) / MANIFEST_NAME
    write_json_atomic(path, manifest)
    return path
