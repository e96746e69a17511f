"""Fixed corrupted sets: per (seed, repeat), one JSON manifest fixing every image's pool file, crop and flip,
so every method meets the same corrupted set (docs/design.md, *Corrupted sets*). Its header records what it
was made from (dataset, split, ids checksum, pool files with sha256, seed, repeat, geometry), so a manifest
that no longer matches is refused instead of silently giving other numbers. Rendering is
:mod:`bgbias.corrupted.render`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from bgbias.assets.digest import sha256_file
from bgbias.backgrounds.pool import default_pools, list_pool, pool_folder, upright_size
from bgbias.bgaugment.background_crops import (
    FLIP_P,
    RATIO,
    SCALE,
    CropBox,
    image_rng,
    sample_background_crop,
)
from bgbias.corrupted.manifest_schema import (
    CORRUPTED_SPLITS,
    DAMAGED,
    Count,
    ManifestFile,
    ManifestGeometry,
    ManifestHeader,
    Sha256,
    Size,
    SplitManifest,
    Text,
    bad_field,
    canonical,
    check_manifest,
    expected,
    ids_digest,
    manifest_text,
    read_manifest,
    shown,
    split_fields,
)
from bgbias.corrupted.manifest_store import manifest_exists, write_manifest
from bgbias.data.geometry import INTERPOLATIONS
from bgbias.data.images import load_image
from bgbias.data.items import Dataset, Item
from bgbias.data.splits import split_items
from bgbias.data.transforms import EvalGeometry, eval_geometry
from bgbias.errors import AssetError, DatasetError, OptionError, given
from bgbias.fileio import sweep_stale_temps
from bgbias.paths import corrupted_root
from bgbias.schema import FORMAT_VERSION, ClosedRecord

MANIFEST_FORMAT = "bgbias-corrupted-manifest"
POOL_OF_SPLIT = {"val": "train", "test": "test", "all": "test"}
"""Corrupted validation draws from the BGAugment (train) pool, as in the paper's code; the test pool stays
unseen. ``all`` (a whole set of one's own, scored as queries and gallery) draws from the test pool."""
SHARED_TEMP_AGE_S = 60.0
"""Manifests are shared (concurrent evaluations may write the same ones): a temporary beside one counts as
left by a killed run only once it is this old."""
BACKGROUND_CROP = {"scale": list(SCALE), "ratio": list(RATIO), "flip_p": FLIP_P}
"""The sampling rules a manifest's header records; a manifest drawn by other rules is another experiment."""


class PoolFile(ClosedRecord):
    """One background of a pool: file name inside the pool folder, content hash and upright size."""

    name: Text
    sha256: Sha256
    width: Size
    height: Size


class CorruptedEntry(ClosedRecord):
    """One image of a corrupted set (a manifest's line): which pool file replaces its background, cut where
    (``[left, top, width, height]``), mirrored or not."""

    id: Text
    background: Text
    box: Annotated[list[Count], expected("a list [left, top, width, height]", lambda box: len(box) == 4)]
    flip: bool

    @property
    def crop_box(self) -> CropBox:
        return CropBox(*self.box)


class CorruptedHeader(ManifestHeader):
    """A corrupted set's header: the skeleton, the sampling rules and the pool it was drawn from."""

    format: Literal[MANIFEST_FORMAT]
    version: Literal[FORMAT_VERSION]
    background_crop: dict[str, Any]
    pool: Annotated[list[PoolFile], expected("a non-empty list", bool)]


ManifestT = TypeVar("ManifestT", bound=SplitManifest)


@dataclass(frozen=True)
class CorruptedManifest(SplitManifest):
    """A loaded and validated corrupted-set manifest; ``pool_dir`` is the folder its backgrounds were checked
    in."""

    entries: tuple[CorruptedEntry, ...]
    pool_dir: Path
    pool: tuple[PoolFile, ...]


# ------------------------------------------------------------------------------------------------- locations
def split_pool_dir(split: str, backgrounds: Path | None = None) -> Path:
    """The pool a split's corrupted set draws from: ``<backgrounds>/train`` for val, ``<backgrounds>/test``
    for test, or ``backgrounds`` itself when it has no such sub-folder; by default ``./backgrounds``, made
    first where it lacks its pools (:func:`~bgbias.backgrounds.pool.default_pools`)."""
    check_corrupted_split(split)
    return pool_folder(backgrounds if backgrounds is not None else default_pools(), POOL_OF_SPLIT[split])


def default_manifest_dir(
    dataset: Dataset, split: str, seed: int, protocol: str = "fixed", fold: int = 0,
    geometry: EvalGeometry | None = None,
) -> Path:
    """``corrupted/<dataset key>/<split>/seed-<S>`` (see :attr:`Dataset.key`); a cv4 validation split gets its
    fold in the folder name, and a geometry other than the dataset's evaluation geometry (a model that wants
    other sizes) ``-resize<R>-crop<C>``, then ``-<interpolation>`` where it is not bilinear: the same draws of
    backgrounds, composited at its size."""
    split_dir = split if protocol == "fixed" else f"{split}-{protocol}-fold{fold}"
    seed_dir = f"seed-{seed}"
    if geometry is not None and geometry != eval_geometry(dataset.name):
        seed_dir += f"-resize{geometry.resize}-crop{geometry.crop}"
        if geometry.interpolation != INTERPOLATIONS[0]:
            seed_dir += f"-{geometry.interpolation}"
    return corrupted_root() / dataset.key / split_dir / seed_dir


def manifest_name(repeat: int) -> str:
    return f"repeat-{repeat}.json"


def repeat_paths(folder: Path, count: int) -> list[Path]:
    """The files of repeats ``0 … count-1`` in ``folder``."""
    return [Path(folder) / manifest_name(r) for r in range(count)]


def check_corrupted_split(split: str) -> None:
    if split not in CORRUPTED_SPLITS:
        raise OptionError(
            f"corrupted sets are made for the val and test splits, not {split!r}",
            fix=f"use {given('val')} or {given('test')}",
            parameter="split",
        )


# ------------------------------------------------------------------------------------------------- making
def describe_pool(pool_dir: Path) -> list[PoolFile]:
    """Name, sha256 and upright size of every image of a pool (each is decoded once, to catch bad files)."""
    files = []
    for path in list_pool(pool_dir):
        width, height = load_image(path).size
        files.append(PoolFile(name=path.name, sha256=sha256_file(path), width=width, height=height))
    return files


def sample_entries(
    items: Sequence[Item], pool: Sequence[PoolFile], seed: int, repeat: int
) -> list[CorruptedEntry]:
    """A background crop for every item, each from the item's own generator (see :func:`image_rng`)."""
    sizes = [(f.width, f.height) for f in pool]
    entries = []
    for item in items:
        crop = sample_background_crop(image_rng(seed, repeat, item.id), sizes, SCALE, RATIO, FLIP_P)
        entries.append(CorruptedEntry(id=item.id, background=pool[crop.background].name,
                                      box=crop.box.as_list(), flip=crop.flip))
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
    """Write ``repeat-0.json … repeat-<repeats-1>.json`` for one split of ``dataset`` (the pool of
    :func:`split_pool_dir`, ``out_dir`` by default :func:`default_manifest_dir`) and return their paths.
    Repeat ``r`` of seed ``S`` is the same whatever ``repeats`` is, so asking for more keeps the earlier."""
    pool_dir = split_pool_dir(split, backgrounds)
    if out_dir is None:
        out_dir = default_manifest_dir(dataset, split, seed, protocol, fold, geometry)
    items, skeleton = split_skeleton(dataset, split, seed, protocol, fold, geometry)
    pool = describe_pool(pool_dir)

    def text(repeat: int) -> str:
        header = CorruptedHeader(format=MANIFEST_FORMAT, **skeleton, repeat=repeat,
                                 background_crop=BACKGROUND_CROP, pool=pool)
        return manifest_text(header, sample_entries(items, pool, seed, repeat))

    return write_repeats(out_dir, repeats, text)


def split_skeleton(
    dataset: Dataset, split: str, seed: int, protocol: str, fold: int, geometry: EvalGeometry | None
) -> tuple[list[Item], dict[str, Any]]:
    """The split's items, and the header fields every manifest of its sets (corrupted or variant) records
    of it, all but the repeat and the kind's own keys; ``geometry`` defaults to the dataset's."""
    check_corrupted_split(split)
    geometry = geometry if geometry is not None else eval_geometry(dataset.name)
    items = split_items(dataset, split, protocol, fold)
    return items, {"version": FORMAT_VERSION, "dataset": dataset.name, "split": split, "protocol": protocol,
                   "fold": fold, "count": len(items), "ids_sha256": ids_sha256(items), "seed": seed,
                   "geometry": ManifestGeometry.of(geometry)}


def write_repeats(out_dir: Path, count: int, text: Callable[[int], str]) -> list[Path]:
    """Write ``text(r)`` as ``out_dir/repeat-<r>.json`` for each of ``count`` repeats, once the temporaries
    killed runs left beside them are swept, and return their paths."""
    paths = repeat_paths(out_dir, count)
    sweep_stale_temps(paths, older_than=SHARED_TEMP_AGE_S)
    for repeat, path in enumerate(paths):
        write_manifest(path, text(repeat))
    return paths


def ids_sha256(items: Sequence[Item]) -> str:
    """Checksum of the ordered image ids of a split: changes when an image is added, removed or renamed."""
    return ids_digest(item.id for item in items)


# ------------------------------------------------------------------------------------------------- resolving
def ensure_manifests(
    folder: Path, count: int, split: str, seed: int, variant: str | None,
    load: Callable[[Path], ManifestT], make: Callable[[], object],
) -> list[ManifestT]:
    """Repeats ``0 … count-1`` in ``folder`` of the split's corrupted sets, or of its ``variant``, made first
    by ``make`` where any is missing. Existing ones are loaded (and so checked) before any is written, so one
    made with another pool or rule is reported, never silently replaced; each must be the split, seed, repeat
    and variant its file name stands for."""
    paths = repeat_paths(folder, count)
    loaded = {path: load(path) for path in paths if manifest_exists(path)}
    for repeat, path in enumerate(paths):
        manifest = loaded.get(path)
        if manifest is None:
            continue
        if manifest.seed != seed:
            raise AssetError(f"the manifest was made with another seed than {seed}", path=path,
                             fix=f"pass {given(manifest.seed)} to match it, or use another manifests "
                                 "folder", parameter="seed")
        held = (manifest.split, manifest.repeat, variant_name(manifest))
        if held != (split, repeat, variant):
            raise AssetError(
                f"the file is named for {_set_description(split, repeat, variant)} but holds "
                f"{_set_description(*held)}",
                path=path,
                fix="use a manifests folder made by bgbias corrupt for this split, without renamed files",
            )
    if len(loaded) == count:
        return [loaded[path] for path in paths]
    # Writes every repeat (repeat r of a seed does not depend on the count, but the header records this
    # run's protocol) and reads them all back, so each digest is of the bytes now on disk.
    make()
    return [load(path) for path in paths]


def _set_description(split: str, repeat: int, variant: str | None) -> str:
    kind = "" if variant is None else f"{variant} variant of the "
    return f"repeat {repeat} of the {kind}{split} split"


# ------------------------------------------------------------------------------------------------- loading
def load_manifest(
    path: Path, dataset: Dataset, backgrounds: Path | None = None, geometry: EvalGeometry | None = None
) -> CorruptedManifest:
    """Read a manifest, check every field, and check it still describes ``dataset``, the evaluation
    ``geometry`` (default the dataset's) and the split's pool in ``backgrounds`` (as for
    :func:`split_pool_dir`); any mismatch is an error that says how to fix it."""
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
            f"the manifest was made for the evaluation geometry {manifest.geometry.describe()}; this "
            f"evaluation uses {expected.describe()}",
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


def manifest_entries(
    manifest: SplitManifest, items: Sequence[Item], dataset_name: str, what: str, remake: str
) -> list[Any]:
    """The entries of ``items`` (matched by id, in their order) in ``manifest``, a ``what`` manifest
    ("corrupted-set") that must be of ``dataset_name`` and name every one of them; a ``DatasetError`` saying
    to ``remake`` ("make the ... again") with the command otherwise."""
    fix = f"{remake}: {remake_command(manifest, dataset_name)}"
    if manifest.dataset != dataset_name:
        raise DatasetError(f"the {what} manifest is for the {manifest.dataset} dataset, not {dataset_name}",
                           path=manifest.path, fix=fix)
    entry_of = {entry.id: entry for entry in manifest.entries}
    missing = [item.id for item in items if item.id not in entry_of]
    if missing:
        raise DatasetError(f"the {what} manifest has no entry for {len(missing)} of the {len(items)} images "
                           f"to evaluate (first: {', '.join(missing[:3])})", path=manifest.path, fix=fix)
    return [entry_of[item.id] for item in items]


def remake_command(manifest: SplitManifest, dataset_name: str) -> str:
    """The ``bgbias corrupt`` call that makes the manifests of ``manifest``'s split again (a variant
    manifest's with its ``--variant``)."""
    split = f"--split {manifest.split}"
    if manifest.protocol != "fixed":
        split += f" --protocol {manifest.protocol} --fold {manifest.fold}"
    variant = variant_name(manifest)
    return (f"bgbias corrupt --dataset {dataset_name} {split} --seed {manifest.seed}"
            + ("" if variant is None else f" --variant {variant}"))


def variant_name(manifest: SplitManifest) -> str | None:
    """The variant a manifest is of, None for a corrupted set."""
    variant = getattr(manifest, "variant", None)
    return None if variant is None else variant.name


def _parse_manifest(path: Path, backgrounds: Path | None) -> CorruptedManifest:
    """A manifest whose every field has the type and range ``bgbias corrupt`` writes, and whose parts agree
    with each other (count, ids checksum, backgrounds and boxes within the pool); ``AssetError`` naming the
    field otherwise. Nothing is coerced: ``"no"`` is not a flip and ``"3"`` not a seed."""
    data, digest = read_manifest(path, MANIFEST_FORMAT, "the corrupted-set manifest")
    manifest = check_manifest(data, ManifestFile[CorruptedHeader, CorruptedEntry], path)
    header = manifest.header
    if canonical(header.background_crop) != canonical(BACKGROUND_CROP):
        raise bad_field("header.background_crop", f"the current sampling rules {canonical(BACKGROUND_CROP)}",
                        shown(header.background_crop), path)
    if len({f.name for f in header.pool}) != len(header.pool):
        raise AssetError("the manifest's pool lists a background twice", path=path, fix=DAMAGED)
    _check_entries(manifest.images, header.pool, path)
    return CorruptedManifest(**split_fields(manifest, path, digest),
                             pool_dir=split_pool_dir(header.split, backgrounds), pool=tuple(header.pool))


def _check_entries(entries: Sequence[CorruptedEntry], pool: Sequence[PoolFile], path: Path) -> None:
    """Every entry names a pool file and a box of at least a pixel inside it."""
    sizes = {f.name: (f.width, f.height) for f in pool}
    for index, entry in enumerate(entries):
        for side in (2, 3):
            if entry.box[side] < 1:
                raise bad_field(f"images[{index}].box[{side}]", "at least 1", shown(entry.box[side]), path)
        if entry.background not in sizes:
            raise bad_field(f"images[{index}].background", "a file of the manifest's pool",
                            shown(entry.background), path)
        if not entry.crop_box.fits(sizes[entry.background]):
            width, height = sizes[entry.background]
            raise bad_field(f"images[{index}].box", f"a box inside {entry.background} ({width}×{height})",
                            shown(entry.box), path)


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
