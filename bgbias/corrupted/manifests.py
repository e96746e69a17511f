"""Fixed corrupted sets: per (seed, repeat), one JSON manifest fixing every image's replacement background.

The paper's code drew test backgrounds from whatever state the random generator was in after training, so no
two methods saw the same corrupted set (docs/design.md, *Corrupted sets*). Here a manifest records, for every
image of a split, the pool file, the crop box and the flip; its header records what it was made from (dataset,
split, ids checksum, pool files with sha256, seed, repeat, evaluation geometry), so a manifest that no longer
matches its dataset, pool or evaluation geometry is refused instead of silently giving other numbers. Every
field is read back strictly (a JSON bool is a flip, ``"no"`` is an error), never coerced. Rendering a manifest
into images is :mod:`bgbias.corrupted.render`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bgbias.assets.digest import sha256_file
from bgbias.backgrounds.pool import list_pool, pool_folder, upright_size
from bgbias.bgaugment.background_crops import (
    FLIP_P,
    RATIO,
    SCALE,
    CropBox,
    image_rng,
    sample_background_crop,
)
from bgbias.corrupted.manifest_fields import (
    DAMAGED,
    bad_field,
    canonical,
    check_keys,
    int_field,
    is_int,
    read_json,
    sha256_field,
    text_field,
)
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


class SplitManifest(Protocol):
    """What every manifest of a split says of it: the corrupted sets' and the profile's variants'."""

    path: Path
    dataset: str
    split: str
    protocol: str
    fold: int
    seed: int
    geometry: EvalGeometry

    @property
    def entries(self) -> Sequence[Any]: ...


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
    return ids_digest(item.id for item in items)


def ids_digest(ids: Iterable[str]) -> str:
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
    check_describes_split(manifest, dataset, geometry, remake)
    _check_pool(manifest.pool, manifest.pool_dir, path, remake)
    return manifest


def check_describes_split(
    manifest: SplitManifest, dataset: Dataset, geometry: EvalGeometry | None, remake: str
) -> list[Item]:
    """The split's items, once ``manifest`` (a corrupted-set or variant manifest) is known to be of
    ``dataset``, at the evaluation ``geometry`` (default the dataset's), and of the split's images as they are
    now; an error with the fix ``remake`` otherwise."""
    if manifest.dataset != dataset.name:
        raise DatasetError(
            f"the manifest is for the {manifest.dataset} dataset, not {dataset.name}",
            path=manifest.path,
            fix=f"pass the manifests of {dataset.name}, or open the {manifest.dataset} dataset",
        )
    expected = geometry if geometry is not None else eval_geometry(dataset.name)
    if manifest.geometry != expected:
        raise AssetError(
            f"the manifest was made for the evaluation geometry resize={manifest.geometry.resize}, crop="
            f"{manifest.geometry.crop}; this evaluation uses resize={expected.resize}, crop={expected.crop}",
            path=manifest.path,
            fix=remake,
        )
    items = split_items(dataset, manifest.split, manifest.protocol, manifest.fold)
    if [entry.id for entry in manifest.entries] != [item.id for item in items]:
        raise DatasetError(
            f"the {manifest.split} split of {dataset.name} at {dataset.root} has changed since the manifest "
            f"was made ({len(items)} images now, {len(manifest.entries)} then)",
            path=manifest.path,
            fix=f"restore the dataset the manifest was made from, or {remake}",
        )
    return items


def remake_command(manifest: SplitManifest, dataset_name: str) -> str:
    """The ``bgbias corrupt`` call that makes the manifests of ``manifest``'s split again (a variant
    manifest's with its ``--variant``)."""
    split = f"--split {manifest.split}"
    if manifest.protocol != "fixed":
        split += f" --protocol {manifest.protocol} --fold {manifest.fold}"
    variant = getattr(manifest, "variant", None)
    return (f"bgbias corrupt --dataset {dataset_name} {split} --seed {manifest.seed}"
            + ("" if variant is None else f" --variant {variant.name}"))


def parse_geometry(header: dict[str, Any], path: Path) -> EvalGeometry:
    """A manifest header's evaluation geometry, checked (crop within resize)."""
    geometry = check_keys(header["geometry"], _GEOMETRY_KEYS, "header.geometry", path)
    resize = int_field(geometry["resize"], "header.geometry.resize", path, low=1)
    return EvalGeometry(resize, int_field(geometry["crop"], "header.geometry.crop", path, low=1, high=resize))


def check_image_list(header: dict[str, Any], ids: Sequence[str], path: Path) -> None:
    """A manifest's entries agree with its header: their count and the checksum of their ids."""
    if int_field(header["count"], "header.count", path, low=1) != len(ids):
        raise AssetError(f"the manifest has {len(ids)} image entries but its header counts "
                         f"{header['count']}", path=path, fix=DAMAGED)
    if sha256_field(header["ids_sha256"], "header.ids_sha256", path) != ids_digest(ids):
        raise AssetError("the manifest's image list does not match its header's ids_sha256", path=path,
                         fix=DAMAGED)


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
    data, digest = read_json(path)
    check_keys(data, _TOP_KEYS, "the manifest", path)
    header, images = data["header"], data["images"]
    if not isinstance(header, dict) or header.get("format") != MANIFEST_FORMAT:
        raise AssetError("not a bgbias corrupted-set manifest", path=path, fix=DAMAGED)
    if not is_int(header.get("version")) or header["version"] != MANIFEST_VERSION:
        raise AssetError(f"manifest version {header.get('version')!r} is not {MANIFEST_VERSION}", path=path,
                         fix=DAMAGED)
    check_keys(header, _HEADER_KEYS, "header", path)
    split = text_field(header["split"], "header.split", path, CORRUPTED_SPLITS)
    protocol = text_field(header["protocol"], "header.protocol", path, PROTOCOLS)
    folds = 1 if protocol == "fixed" else CV_FOLDS
    geometry = parse_geometry(header, path)
    if canonical(header["background_crop"]) != canonical(BACKGROUND_CROP):
        raise bad_field("header.background_crop", f"the current sampling rules {canonical(BACKGROUND_CROP)}",
                   header["background_crop"], path)
    dataset = text_field(header["dataset"], "header.dataset", path)
    fold = int_field(header["fold"], "header.fold", path, high=folds - 1)
    seed = int_field(header["seed"], "header.seed", path)
    repeat = int_field(header["repeat"], "header.repeat", path)
    pool = _pool(header["pool"], path)
    if not isinstance(images, list):
        raise bad_field("images", "a list", images, path)
    entries = tuple(_entry(raw, f"images[{index}]", path) for index, raw in enumerate(images))
    check_image_list(header, [e.id for e in entries], path)
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
        geometry=geometry,
        pool_dir=split_pool_dir(split, backgrounds),
        pool=pool,
        entries=entries,
    )


def _pool(raw: Any, path: Path) -> tuple[PoolFile, ...]:
    if not isinstance(raw, list) or not raw:
        raise bad_field("header.pool", "a non-empty list", raw, path)
    pool = []
    for index, item in enumerate(raw):
        where = f"header.pool[{index}]"
        check_keys(item, _POOL_KEYS, where, path)
        pool.append(PoolFile(
            text_field(item["name"], f"{where}.name", path),
            sha256_field(item["sha256"], f"{where}.sha256", path),
            int_field(item["width"], f"{where}.width", path, low=1),
            int_field(item["height"], f"{where}.height", path, low=1),
        ))
    names = [f.name for f in pool]
    if len(set(names)) != len(names):
        raise AssetError("the manifest's pool lists a background twice", path=path, fix=DAMAGED)
    return tuple(pool)


def _entry(raw: Any, where: str, path: Path) -> CorruptedEntry:
    check_keys(raw, _ENTRY_KEYS, where, path)
    box = raw["box"]
    if not isinstance(box, list) or len(box) != 4:
        raise bad_field(f"{where}.box", "a list [left, top, width, height]", box, path)
    left, top, width, height = (
        int_field(value, f"{where}.box[{i}]", path, low=int(i >= 2)) for i, value in enumerate(box)
    )
    flip = raw["flip"]
    if not isinstance(flip, bool):
        raise bad_field(f"{where}.flip", "true or false", flip, path)
    return CorruptedEntry(
        text_field(raw["id"], f"{where}.id", path),
        text_field(raw["background"], f"{where}.background", path),
        CropBox(left, top, width, height), flip,
    )


def _check_entries(entries: Sequence[CorruptedEntry], pool: Sequence[PoolFile], path: Path) -> None:
    """Every entry names a pool file and a box inside it."""
    sizes = {f.name: (f.width, f.height) for f in pool}
    for index, entry in enumerate(entries):
        if entry.background not in sizes:
            raise bad_field(f"images[{index}].background", "a file of the manifest's pool", entry.background,
                            path)
        if not entry.box.fits(sizes[entry.background]):
            width, height = sizes[entry.background]
            raise bad_field(f"images[{index}].box", f"a box inside {entry.background} ({width}×{height})",
                       entry.box.as_list(), path)


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
            fix=DAMAGED,
        )
