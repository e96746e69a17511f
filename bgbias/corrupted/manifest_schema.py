"""The shared skeleton of every manifest of a split (corrupted sets and the profile's variants): header, file,
reader and writer. Each kind declares its header and image line as a :class:`~bgbias.schema.ClosedRecord`, so
a manifest edited by hand names its bad field instead of silently giving other images (``"no"`` is not a flip,
``"3"`` not a seed); what a declaration cannot say (crop within resize, fold, the image list against the
header's count and checksum) is checked here once for both.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import AfterValidator, Field, ValidationError

from bgbias.assets.digest import is_sha256
from bgbias.corrupted.manifest_store import read_manifest_bytes
from bgbias.data.geometry import INTERPOLATIONS
from bgbias.data.splits import CV_FOLDS, PROTOCOLS
from bgbias.data.transforms import EvalGeometry
from bgbias.errors import AssetError
from bgbias.schema import ClosedRecord, Record, check_format, explain_problem, shown, unique_keys

DAMAGED = "make the manifest again with bgbias corrupt (a manifest is never edited by hand)"
CORRUPTED_SPLITS = ("val", "test", "all")


def expected(words: str, test: Callable[[Any], bool]) -> AfterValidator:
    """A check of a value whose type is right; ``words`` say what it must be (explain_problem shows them)."""

    def check(value: Any) -> Any:
        if not test(value):
            raise ValueError(words)
        return value

    return AfterValidator(check)


Text = Annotated[str, expected("a non-empty string", bool)]
Sha256 = Annotated[str, expected("a sha256 (64 lower-case hex digits)", is_sha256)]
Count = Annotated[int, Field(ge=0)]
Size = Annotated[int, Field(ge=1)]


class ManifestGeometry(ClosedRecord):
    """The evaluation geometry a set was made for; the interpolation is written only where it is not the
    default bilinear, so manifests of that geometry keep their bytes."""

    resize: Size
    crop: Size
    interpolation: Literal[INTERPOLATIONS] = Field(INTERPOLATIONS[0],
                                                   exclude_if=lambda value: value == INTERPOLATIONS[0])

    @classmethod
    def of(cls, geometry: EvalGeometry) -> ManifestGeometry:
        return cls(resize=geometry.resize, crop=geometry.crop, interpolation=geometry.interpolation)

    def eval_geometry(self) -> EvalGeometry:
        return EvalGeometry(self.resize, self.crop, self.interpolation)


class ManifestHeader(ClosedRecord):
    """What every manifest of a split records of it; a kind adds its own keys."""

    format: str
    version: int
    dataset: Text
    split: Literal[CORRUPTED_SPLITS]
    protocol: Literal[PROTOCOLS]
    fold: Count
    count: Size
    ids_sha256: Sha256
    seed: Count
    repeat: Count
    geometry: ManifestGeometry


HeaderT = TypeVar("HeaderT", bound=ManifestHeader)
LineT = TypeVar("LineT")


class ManifestFile(ClosedRecord, Generic[HeaderT, LineT]):
    """A manifest as written: its header and one line per image."""

    header: HeaderT
    images: list[LineT]


FileT = TypeVar("FileT", bound=ManifestFile[Any, Any])


def read_manifest(path: Path, file_format: str, what: str) -> tuple[dict[str, Any], str]:
    """The JSON of the manifest at ``path``, its header stating ``file_format`` (a ``RecordError`` otherwise,
    :func:`~bgbias.schema.check_format`; ``what``: "the corrupted-set manifest"), and the sha256 of the very
    bytes read; ``AssetError`` naming the file where it cannot be read. A key given twice in one object is
    refused."""
    try:
        raw = read_manifest_bytes(path)
    except FileNotFoundError:
        raise AssetError("corrupted-set manifest not found", path=path,
                         fix="make it with: bgbias corrupt --dataset NAME") from None
    except OSError as exc:
        raise AssetError(f"corrupted-set manifest cannot be read ({exc})", path=path, fix=DAMAGED) from exc
    try:
        data = json.loads(raw.decode("utf-8"), object_pairs_hook=unique_keys)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise AssetError(f"corrupted-set manifest cannot be read ({exc})", path=path, fix=DAMAGED) from exc
    check_format(data.get("header") if isinstance(data, dict) else None, file_format, path=path, what=what,
                 fix="re-run bgbias corrupt (a manifest is never edited by hand)")
    return data, hashlib.sha256(raw).hexdigest()


def check_manifest(data: dict[str, Any], shape: type[FileT], path: Path) -> FileT:
    """A manifest's JSON as ``shape``, its skeleton checked (:func:`check_skeleton`)."""
    manifest = check_fields(data, shape, path)
    check_skeleton(manifest, path)
    return manifest


def check_fields(data: dict[str, Any], shape: type[FileT], path: Path) -> FileT:
    """A manifest's JSON as ``shape``; ``AssetError`` naming the field, what it must be and what it holds
    otherwise."""
    try:
        return shape.model_validate(data, strict=True)
    except ValidationError as error:
        where, wanted, value, _ = explain_problem(error, shape)
        raise bad_field(where, wanted, value, path) from None


def check_skeleton(manifest: ManifestFile[Any, Any], path: Path) -> None:
    """What the declaration cannot say: crop within resize, the fold one of the protocol's, and the image
    list as the header counts and checksums it."""
    header = manifest.header
    if header.geometry.crop > header.geometry.resize:
        raise bad_field("header.geometry.crop", f"at most {header.geometry.resize} (the resize)",
                        shown(header.geometry.crop), path)
    folds = 1 if header.protocol == "fixed" else CV_FOLDS
    if header.fold >= folds:
        raise bad_field("header.fold", f"at most {folds - 1} ({header.protocol})", shown(header.fold), path)
    ids = [line.id for line in manifest.images]
    if header.count != len(ids):
        raise AssetError(f"the manifest has {len(ids)} image entries but its header counts {header.count}",
                         path=path, fix=DAMAGED)
    if header.ids_sha256 != ids_digest(ids):
        raise AssetError("the manifest's image list does not match its header's ids_sha256", path=path,
                         fix=DAMAGED)


@dataclass(frozen=True)
class SplitManifest:
    """A manifest of a split as loaded and checked, of either kind: its file, the digest of the bytes it was
    read from, what its header's skeleton says, and its images' lines."""

    path: Path
    sha256: str
    dataset: str
    split: str
    protocol: str
    fold: int
    seed: int
    repeat: int
    geometry: EvalGeometry
    entries: tuple[Any, ...]


def split_fields(manifest: ManifestFile[Any, Any], path: Path, digest: str) -> dict[str, Any]:
    """The :class:`SplitManifest` fields of a checked manifest read from ``path`` (``digest``: its bytes'),
    by name."""
    header = manifest.header
    return {"path": path, "sha256": digest, "dataset": header.dataset, "split": header.split,
            "protocol": header.protocol, "fold": header.fold, "seed": header.seed, "repeat": header.repeat,
            "geometry": header.geometry.eval_geometry(), "entries": tuple(manifest.images)}


def manifest_text(header: Record, lines: Sequence[Record]) -> str:
    """Stable JSON: the header indented with sorted keys, then one line per image in its declared key order
    (keys without a value left out), so a manifest reads and diffs by eye."""
    header_text = json.dumps(header.model_dump(), indent=2, sort_keys=True, ensure_ascii=False)
    lines_text = [json.dumps(line.model_dump(exclude_none=True), ensure_ascii=False) for line in lines]
    return ('{\n  "header": ' + header_text.replace("\n", "\n  ") + ',\n  "images": [\n    '
            + ",\n    ".join(lines_text) + "\n  ]\n}\n")


def ids_digest(ids: Iterable[str]) -> str:
    """Checksum of the ordered image ids of a split: changes when an image is added, removed or renamed."""
    return hashlib.sha256("".join(f"{image_id}\n" for image_id in ids).encode("utf-8")).hexdigest()


def canonical(value: Any) -> str:
    """JSON text that tells ``1``, ``1.0`` and ``true`` apart, for comparing recorded values exactly."""
    return json.dumps(value, sort_keys=True)


def bad_field(where: str, wanted: str, value: str, path: Path) -> AssetError:
    """The error of a manifest field: which, what it must be, what it holds (as :func:`shown`)."""
    return AssetError(f"manifest field {where} must be {wanted}, got {value}", path=path, fix=DAMAGED)
