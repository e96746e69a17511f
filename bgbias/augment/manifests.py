"""Fixed corrupted sets: per (seed, repeat), one JSON manifest fixing every image's replacement background.

The paper's code drew test backgrounds from whatever state the random generator was in after training, so no
two methods saw the same corrupted set (docs/design.md, *Corrupted sets*). Here a manifest records, for every
image of a split, the pool file, the crop box and the flip; its header records what it was made from (dataset,
split, ids checksum, pool files with sha256, seed, repeat, evaluation geometry), so a manifest that no longer
matches its dataset, pool or evaluation geometry is refused instead of silently giving other numbers. Every
field is read back strictly (a JSON bool is a flip, ``"no"`` is an error), never coerced. Rendering a manifest
into images is :mod:`bgbias.augment.render`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bgbias.assets.digest import is_sha256, sha256_file
from bgbias.augment.background_crops import (
    FLIP_P,
    RATIO,
    SCALE,
    CropBox,
    image_rng,
    sample_background_crop,
)
from bgbias.backgrounds.pool import list_pool, pool_folder, upright_size
from bgbias.data.images import load_image
from bgbias.data.items import Dataset, Item
from bgbias.data.splits import CV_FOLDS, PROTOCOLS, split_items
from bgbias.data.transforms import EvalGeometry, eval_geometry
from bgbias.errors import AssetError, DatasetError, OptionError
from bgbias.fileio import sweep_stale_temps, write_text_atomic
from bgbias.paths import backgrounds_root, corrupted_root

MANIFEST_FORMAT = "bgbias-corrupted-manifest"
MANIFEST_VERSION = 1
CORRUPTED_SPLITS = ("val", "test")
POOL_OF_SPLIT = {"val": "train", "test": "test"}
"""Corrupted validation draws from the BGAugment (train) pool, as in the paper's code; the test pool stays
unseen."""
SHARED_TEMP_AGE_S = 60.0
"""Manifests are shared (concurrent evaluations may write the same ones): a temporary beside one counts as
left by a killed run only once it is this old."""
BACKGROUND_CROP = {"scale": list(SCALE), "ratio": list(RATIO), "flip_p": FLIP_P}
"""The sampling rules a manifest's header records; a manifest drawn by other rules is another experiment."""


@dataclass(frozen=True)
class PoolFile:
    """One background of a pool: file name inside the pool folder, content hash and upright size."""

    name: str
    sha256: str
    width: int
    height: int

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "sha256": self.sha256, "width": self.width, "height": self.height}


@dataclass(frozen=True)
class CorruptedEntry:
    """One image of a corrupted set: which pool file replaces its background, cut where, mirrored or not."""

    id: str
    background: str
    box: CropBox
    flip: bool

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "background": self.background, "box": self.box.as_list(), "flip": self.flip}


@dataclass(frozen=True)
class CorruptedManifest:
    """A loaded and validated manifest; ``pool_dir`` is the folder its backgrounds were checked in, ``sha256``
    the digest of the bytes it was read from."""

    path: Path
    sha256: str
    dataset: str
    split: str
    protocol: str
    fold: int
    seed: int
    repeat: int
    geometry: EvalGeometry
    pool_dir: Path
    pool: tuple[PoolFile, ...]
    entries: tuple[CorruptedEntry, ...]


# ------------------------------------------------------------------------------------------------- locations
def split_pool_dir(split: str, backgrounds: Path | None = None) -> Path:
    """The pool a split's corrupted set draws from.

    ``<backgrounds>/train`` for val, ``<backgrounds>/test`` for test, or ``backgrounds`` itself when it has no
    such sub-folder (a single pool); ``backgrounds`` defaults to ``./backgrounds``.
    """
    check_corrupted_split(split)
    return pool_folder(backgrounds if backgrounds is not None else backgrounds_root(), POOL_OF_SPLIT[split])


def default_manifest_dir(
    dataset: Dataset, split: str, seed: int, protocol: str = "fixed", fold: int = 0,
    geometry: EvalGeometry | None = None,
) -> Path:
    """``corrupted/<dataset key>/<split>/seed-<S>`` (see :attr:`Dataset.key`); a cv4 validation split gets its
    fold in the folder name, and a geometry other than the dataset's evaluation geometry (a model that wants
    other sizes) ``-resize<R>-crop<C>``: the same draws of backgrounds, composited at its size."""
    split_dir = split if protocol == "fixed" else f"{split}-{protocol}-fold{fold}"
    seed_dir = f"seed-{seed}"
    if geometry is not None and geometry != eval_geometry(dataset.name):
        seed_dir += f"-resize{geometry.resize}-crop{geometry.crop}"
    return corrupted_root() / dataset.key / split_dir / seed_dir


def manifest_name(repeat: int) -> str:
    return f"repeat-{repeat}.json"


def check_corrupted_split(split: str) -> None:
    if split not in CORRUPTED_SPLITS:
        raise OptionError(
            f"corrupted sets are made for the val and test splits, not {split!r}",
            fix="use --split val or --split test",
        )


# ------------------------------------------------------------------------------------------------- making
def describe_pool(pool_dir: Path) -> list[PoolFile]:
    """Name, sha256 and upright size of every image of a pool (each is decoded once, to catch bad files)."""
    files = []
    for path in list_pool(pool_dir):
        width, height = load_image(path).size
        files.append(PoolFile(path.name, sha256_file(path), width, height))
    return files


def sample_entries(
    items: Sequence[Item], pool: Sequence[PoolFile], seed: int, repeat: int
) -> list[CorruptedEntry]:
    """A background crop for every item, each from the item's own generator (see :func:`image_rng`)."""
    sizes = [(f.width, f.height) for f in pool]
    entries = []
    for item in items:
        crop = sample_background_crop(image_rng(seed, repeat, item.id), sizes, SCALE, RATIO, FLIP_P)
        entries.append(CorruptedEntry(item.id, pool[crop.background].name, crop.box, crop.flip))
    return entries


def make_corrupted_manifests(
    dataset: Dataset,
    split: str = "test",
    repeats: int = 5,
    seed: int = 0,
    backgrounds: Path | None = None,
    out_dir: Path | None = None,
    protocol: str = "fixed",
    fold: int = 0,
    geometry: EvalGeometry | None = None,
) -> list[Path]:
    """Write ``repeat-0.json … repeat-<repeats-1>.json`` for one split of ``dataset`` and return their paths.

    The pool is the split's pool in ``backgrounds`` (:func:`split_pool_dir`), ``out_dir`` defaults to
    :func:`default_manifest_dir`, ``geometry`` to the dataset's evaluation geometry. Repeat ``r`` of seed
    ``S`` is the same whatever ``repeats`` is, so asking for more repeats later keeps the earlier ones.
    """
    check_corrupted_split(split)
    if repeats < 1:
        raise OptionError(f"--repeats must be at least 1, got {repeats}", fix="pass --repeats 1 or more")
    if seed < 0:
        raise OptionError(f"--seed must be non-negative, got {seed}", fix="pass a seed >= 0")
    geometry = geometry if geometry is not None else eval_geometry(dataset.name)
    pool_dir = split_pool_dir(split, backgrounds)
    if out_dir is None:
        out_dir = default_manifest_dir(dataset, split, seed, protocol, fold, geometry)
    items = split_items(dataset, split, protocol, fold)
    pool = describe_pool(pool_dir)
    sweep_stale_temps([out_dir / manifest_name(r) for r in range(repeats)], older_than=SHARED_TEMP_AGE_S)
    paths = []
    for repeat in range(repeats):
        header = {
            "format": MANIFEST_FORMAT,
            "version": MANIFEST_VERSION,
            "dataset": dataset.name,
            "split": split,
            "protocol": protocol,
            "fold": fold,
            "count": len(items),
            "ids_sha256": ids_sha256(items),
            "seed": seed,
            "repeat": repeat,
            "geometry": geometry.as_dict(),
            "background_crop": BACKGROUND_CROP,
            "pool": [f.as_dict() for f in pool],
        }
        entries = sample_entries(items, pool, seed, repeat)
        path = out_dir / manifest_name(repeat)
        write_text_atomic(path, manifest_text(header, entries))
        paths.append(path)
    return paths


def manifest_text(header: dict[str, Any], entries: Sequence[CorruptedEntry]) -> str:
    """Stable JSON: the header indented, then one line per image, so a manifest reads and diffs by eye."""
    header_text = json.dumps(header, indent=2, sort_keys=True, ensure_ascii=False).replace("\n", "\n  ")
    lines = [json.dumps(e.as_dict(), ensure_ascii=False) for e in entries]  # id first: fixed field order
    return '{\n  "header": ' + header_text + ',\n  "images": [\n    ' + ",\n    ".join(lines) + "\n  ]\n}\n"


def ids_sha256(items: Sequence[Item]) -> str:
    """Checksum of the ordered image ids of a split: changes when an image is added, removed or renamed."""
    return _ids_digest(item.id for item in items)


def _ids_digest(ids: Iterable[str]) -> str:
    return hashlib.sha256("".join(f"{image_id}\n" for image_id in ids).encode("utf-8")).hexdigest()


# ------------------------------------------------------------------------------------------------- loading
def load_manifest(
    path: Path, dataset: Dataset, backgrounds: Path | None = None, geometry: EvalGeometry | None = None
) -> CorruptedManifest:
    """Read a manifest, check every field, and check it still describes ``dataset``, the evaluation geometry
    and the split's pool in ``backgrounds``.

    ``backgrounds`` is as for :func:`split_pool_dir`; ``geometry`` defaults to the dataset's evaluation
    geometry. Any mismatch is an error that says how to fix it: restore the dataset or pool it was made from,
    or make the manifests again.
    """
    path = Path(path)
    manifest = _parse_manifest(path, backgrounds)
    remake = f"make the manifests again: {remake_command(manifest, dataset.name)}"
    if manifest.dataset != dataset.name:
        raise DatasetError(
            f"the manifest is for the {manifest.dataset} dataset, not {dataset.name}",
            path=path,
            fix=f"pass the manifests of {dataset.name}, or open the {manifest.dataset} dataset",
        )
    expected = geometry if geometry is not None else eval_geometry(dataset.name)
    if manifest.geometry != expected:
        raise AssetError(
            f"the manifest was made for the evaluation geometry resize={manifest.geometry.resize}, crop="
            f"{manifest.geometry.crop}; this evaluation uses resize={expected.resize}, crop={expected.crop}",
            path=path,
            fix=remake,
        )
    items = split_items(dataset, manifest.split, manifest.protocol, manifest.fold)
    if [entry.id for entry in manifest.entries] != [item.id for item in items]:
        raise DatasetError(
            f"the {manifest.split} split of {dataset.name} at {dataset.root} has changed since the manifest "
            f"was made ({len(items)} images now, {len(manifest.entries)} then)",
            path=path,
            fix=f"restore the dataset the manifest was made from, or {remake}",
        )
    _check_pool(manifest.pool, manifest.pool_dir, path, remake)
    return manifest


def remake_command(manifest: CorruptedManifest, dataset_name: str) -> str:
    """The ``bgbias corrupt`` call that makes the manifests of ``manifest``'s split again."""
    split = f"--split {manifest.split}"
    if manifest.protocol != "fixed":
        split += f" --protocol {manifest.protocol} --fold {manifest.fold}"
    return f"bgbias corrupt --dataset {dataset_name} {split} --seed {manifest.seed}"


_DAMAGED = "make the manifest again with bgbias corrupt (a manifest is never edited by hand)"
_TOP_KEYS = ("header", "images")
_HEADER_KEYS = (
    "format", "version", "dataset", "split", "protocol", "fold", "count", "ids_sha256", "seed", "repeat",
    "geometry", "background_crop", "pool",
)
_GEOMETRY_KEYS = ("resize", "crop")
_POOL_KEYS = ("name", "sha256", "width", "height")
_ENTRY_KEYS = ("id", "background", "box", "flip")


def _parse_manifest(path: Path, backgrounds: Path | None) -> CorruptedManifest:
    """A manifest whose every field has the type and range ``bgbias corrupt`` writes, and whose parts agree
    with each other (count, ids checksum, backgrounds and boxes within the pool); ``AssetError`` naming the
    field otherwise. Nothing is coerced: ``"no"`` is not a flip and ``"3"`` not a seed."""
    data, digest = _read_json(path)
    _check_keys(data, _TOP_KEYS, "the manifest", path)
    header, images = data["header"], data["images"]
    if not isinstance(header, dict) or header.get("format") != MANIFEST_FORMAT:
        raise AssetError("not a bgbias corrupted-set manifest", path=path, fix=_DAMAGED)
    if not _is_int(header.get("version")) or header["version"] != MANIFEST_VERSION:
        raise AssetError(f"manifest version {header.get('version')!r} is not {MANIFEST_VERSION}", path=path,
                         fix=_DAMAGED)
    _check_keys(header, _HEADER_KEYS, "header", path)
    split = _text(header["split"], "header.split", path, CORRUPTED_SPLITS)
    protocol = _text(header["protocol"], "header.protocol", path, PROTOCOLS)
    folds = 1 if protocol == "fixed" else CV_FOLDS
    geometry = _check_keys(header["geometry"], _GEOMETRY_KEYS, "header.geometry", path)
    resize = _int(geometry["resize"], "header.geometry.resize", path, low=1)
    crop = _int(geometry["crop"], "header.geometry.crop", path, low=1, high=resize)
    if _canonical(header["background_crop"]) != _canonical(BACKGROUND_CROP):
        raise _bad("header.background_crop", f"the current sampling rules {_canonical(BACKGROUND_CROP)}",
                   header["background_crop"], path)
    dataset = _text(header["dataset"], "header.dataset", path)
    fold = _int(header["fold"], "header.fold", path, high=folds - 1)
    seed = _int(header["seed"], "header.seed", path)
    repeat = _int(header["repeat"], "header.repeat", path)
    pool = _pool(header["pool"], path)
    if not isinstance(images, list):
        raise _bad("images", "a list", images, path)
    entries = tuple(_entry(raw, f"images[{index}]", path) for index, raw in enumerate(images))
    if _int(header["count"], "header.count", path, low=1) != len(entries):
        raise AssetError(f"the manifest has {len(entries)} image entries but its header counts "
                         f"{header['count']}", path=path, fix=_DAMAGED)
    if _sha256(header["ids_sha256"], "header.ids_sha256", path) != _ids_digest(e.id for e in entries):
        raise AssetError("the manifest's image list does not match its header's ids_sha256", path=path,
                         fix=_DAMAGED)
    _check_entries(entries, pool, path)
    return CorruptedManifest(
        path=path,
        sha256=digest,
        dataset=dataset,
        split=split,
        protocol=protocol,
        fold=fold,
        seed=seed,
        repeat=repeat,
        geometry=EvalGeometry(resize, crop),
        pool_dir=split_pool_dir(split, backgrounds),
        pool=pool,
        entries=entries,
    )


def _read_json(path: Path) -> tuple[Any, str]:
    """The parsed file and the sha256 of the very bytes parsed; a key given twice in one object is refused."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise AssetError("corrupted-set manifest not found", path=path,
                         fix="make it with: bgbias corrupt --dataset NAME") from None
    except OSError as exc:
        raise AssetError(f"corrupted-set manifest cannot be read ({exc})", path=path, fix=_DAMAGED) from exc
    try:
        data = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise AssetError(f"corrupted-set manifest cannot be read ({exc})", path=path, fix=_DAMAGED) from exc
    return data, hashlib.sha256(raw).hexdigest()


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise ValueError(f"a key is given twice in one object: {sorted(k for k, _ in pairs)}")
    return found


def _pool(raw: Any, path: Path) -> tuple[PoolFile, ...]:
    if not isinstance(raw, list) or not raw:
        raise _bad("header.pool", "a non-empty list", raw, path)
    pool = []
    for index, item in enumerate(raw):
        where = f"header.pool[{index}]"
        _check_keys(item, _POOL_KEYS, where, path)
        pool.append(PoolFile(
            _text(item["name"], f"{where}.name", path),
            _sha256(item["sha256"], f"{where}.sha256", path),
            _int(item["width"], f"{where}.width", path, low=1),
            _int(item["height"], f"{where}.height", path, low=1),
        ))
    names = [f.name for f in pool]
    if len(set(names)) != len(names):
        raise AssetError("the manifest's pool lists a background twice", path=path, fix=_DAMAGED)
    return tuple(pool)


def _entry(raw: Any, where: str, path: Path) -> CorruptedEntry:
    _check_keys(raw, _ENTRY_KEYS, where, path)
    box = raw["box"]
    if not isinstance(box, list) or len(box) != 4:
        raise _bad(f"{where}.box", "a list [left, top, width, height]", box, path)
    left, top, width, height = (
        _int(value, f"{where}.box[{i}]", path, low=int(i >= 2)) for i, value in enumerate(box)
    )
    flip = raw["flip"]
    if not isinstance(flip, bool):
        raise _bad(f"{where}.flip", "true or false", flip, path)
    return CorruptedEntry(
        _text(raw["id"], f"{where}.id", path), _text(raw["background"], f"{where}.background", path),
        CropBox(left, top, width, height), flip,
    )


def _check_entries(entries: Sequence[CorruptedEntry], pool: Sequence[PoolFile], path: Path) -> None:
    """Every entry names a pool file and a box inside it."""
    sizes = {f.name: (f.width, f.height) for f in pool}
    for index, entry in enumerate(entries):
        if entry.background not in sizes:
            raise _bad(f"images[{index}].background", "a file of the manifest's pool", entry.background, path)
        if not entry.box.fits(sizes[entry.background]):
            width, height = sizes[entry.background]
            raise _bad(f"images[{index}].box", f"a box inside {entry.background} ({width}×{height})",
                       entry.box.as_list(), path)


def _check_keys(raw: Any, keys: Sequence[str], where: str, path: Path) -> dict[str, Any]:
    """``raw`` must be a JSON object with exactly ``keys``."""
    if not isinstance(raw, dict):
        raise _bad(where, "an object", raw, path)
    missing = [key for key in keys if key not in raw]
    unknown = sorted(set(raw) - set(keys))
    if missing or unknown:
        parts = [f"lacks {', '.join(missing)}" if missing else "", f"has unknown {', '.join(unknown)}"
                 if unknown else ""]
        raise AssetError(f"{where} {' and '.join(p for p in parts if p)}", path=path, fix=_DAMAGED)
    return raw


def _is_int(value: Any) -> bool:
    """A JSON integer: Python's ``bool`` is an ``int`` too, but ``true`` is not a number."""
    return isinstance(value, int) and not isinstance(value, bool)


def _int(value: Any, where: str, path: Path, low: int = 0, high: int | None = None) -> int:
    if not _is_int(value) or value < low or (high is not None and value > high):
        wanted = f"an integer in {low}..{high}" if high is not None else f"an integer >= {low}"
        raise _bad(where, wanted, value, path)
    return value


def _text(value: Any, where: str, path: Path, allowed: Sequence[str] | None = None) -> str:
    if allowed is not None and value not in allowed:
        raise _bad(where, f"one of {', '.join(allowed)}", value, path)
    if not isinstance(value, str) or not value:
        raise _bad(where, "a non-empty string", value, path)
    return value


def _sha256(value: Any, where: str, path: Path) -> str:
    if not is_sha256(value):
        raise _bad(where, "a sha256 (64 lower-case hex digits)", value, path)
    return value


def _canonical(value: Any) -> str:
    """JSON text that tells ``1``, ``1.0`` and ``true`` apart, for comparing recorded values exactly."""
    return json.dumps(value, sort_keys=True)


def _bad(where: str, wanted: str, value: Any, path: Path) -> AssetError:
    shown = json.dumps(value, ensure_ascii=False)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return AssetError(f"manifest field {where} must be {wanted}, got {shown}", path=path, fix=_DAMAGED)


def _check_pool(pool: Sequence[PoolFile], pool_dir: Path, path: Path, remake: str) -> None:
    """The pool folder must hold exactly the recorded files, byte for byte, at the recorded sizes."""
    restore = f"restore the pool, pass the backgrounds the manifest was made with, or {remake}"
    present = {p.name: p for p in list_pool(pool_dir)}
    recorded = {f.name for f in pool}
    if set(present) != recorded:
        gone = sorted(recorded - set(present))
        new = sorted(set(present) - recorded)
        raise AssetError(
            f"the background pool in {pool_dir} differs from the one the manifest was made with "
            f"(missing: {', '.join(gone[:5]) or 'none'}; "
            f"not in the manifest: {', '.join(new[:5]) or 'none'})",
            path=path,
            fix=restore,
        )
    changed = [f.name for f in pool if sha256_file(present[f.name]) != f.sha256]
    if changed:
        raise AssetError(
            f"{len(changed)} background(s) in {pool_dir} changed since the manifest was made: "
            f"{', '.join(changed[:5])}",
            path=path,
            fix=restore,
        )
    resized = [f.name for f in pool if upright_size(present[f.name]) != (f.width, f.height)]
    if resized:
        raise AssetError(
            f"the manifest records other sizes than the files have for {len(resized)} background(s): "
            f"{', '.join(resized[:5])}",
            path=path,
            fix=_DAMAGED,
        )
