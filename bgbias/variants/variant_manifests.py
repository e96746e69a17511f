"""Fixed variant sets of the background-reliance profile: one JSON manifest per (variant, seed, repeat).

The same design as the corrupted sets' manifests (:mod:`bgbias.corrupted.manifests`): a header recording what
the set was made from (variant and its rule, dataset, split, ids checksum, seed, repeat, evaluation geometry)
and one line per image, read back strictly and checked against the dataset, so every model meets the same
images and a manifest that no longer fits is refused. The one random choice of a variant, a mixed variant's
donor image, is drawn from a stream keyed by (seed, repeat, variant, image id), so it depends neither on
order nor on the number of repeats. Variants without a donor are one fixed set (repeat 0). They live beside
the paper's repeats, in ``<manifest folder>/<variant>/repeat-<r>.json``.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bgbias.corrupted.manifest_fields import (
    DAMAGED,
    bad_field,
    check_keys,
    int_field,
    is_int,
    read_json,
    text_field,
)
from bgbias.corrupted.manifests import (
    CORRUPTED_SPLITS,
    SHARED_TEMP_AGE_S,
    check_corrupted_split,
    check_describes_split,
    check_image_list,
    default_manifest_dir,
    ids_sha256,
    make_corrupted_manifests,
    manifest_name,
    parse_geometry,
    remake_command,
)
from bgbias.data.items import Dataset, Item
from bgbias.data.splits import CV_FOLDS, PROTOCOLS, split_items
from bgbias.data.transforms import EvalGeometry, eval_geometry
from bgbias.errors import AssetError, OptionError
from bgbias.fileio import sweep_stale_temps, write_text_atomic
from bgbias.variants.variants import VARIANTS, Variant, variant

VARIANT_FORMAT = "bgbias-variant-manifest"
VARIANT_VERSION = 1
PAPER_SET = "random-bg"
"""The paper's corrupted sets (random photographs of the pool), beside the variants."""
SET_NAMES = (PAPER_SET, *VARIANTS)
_HEADER_KEYS = (
    "format", "version", "variant", "rule", "dataset", "split", "protocol", "fold", "count", "ids_sha256",
    "seed", "repeat", "geometry",
)


@dataclass(frozen=True)
class VariantEntry:
    """One image of a variant set; ``donor`` is the id of the image whose background a mixed variant uses."""

    id: str
    donor: str | None = None

    def as_dict(self) -> dict[str, str]:
        return {"id": self.id} if self.donor is None else {"id": self.id, "donor": self.donor}


@dataclass(frozen=True)
class VariantManifest:
    """A loaded and validated variant manifest; ``sha256`` is the digest of the bytes it was read from."""

    path: Path
    sha256: str
    variant: Variant
    dataset: str
    split: str
    protocol: str
    fold: int
    seed: int
    repeat: int
    geometry: EvalGeometry
    entries: tuple[VariantEntry, ...]


def make_sets(
    dataset: Dataset,
    names: Sequence[str],
    split: str = "test",
    repeats: int = 5,
    seed: int = 0,
    backgrounds: Path | None = None,
    out_dir: Path | None = None,
    protocol: str = "fixed",
    fold: int = 0,
) -> dict[str, list[Path]]:
    """The manifests of each set named (:data:`SET_NAMES`, or ``all`` of them) of one split, by name: the
    paper's repeats in ``out_dir`` (default :func:`~bgbias.corrupted.manifests.default_manifest_dir`), each
    variant's in ``out_dir/<variant>``."""
    names = [name for given in names for name in (SET_NAMES if given == "all" else (given,))]
    unknown = [name for name in names if name not in SET_NAMES]
    if unknown:
        raise OptionError(f"unknown variant {', '.join(unknown)}",
                          fix=f"use one of {', '.join(SET_NAMES)}, or all")
    if out_dir is None:
        out_dir = default_manifest_dir(dataset, split, seed, protocol, fold)
    made = {}
    for name in dict.fromkeys(names):
        if name == PAPER_SET:
            made[name] = make_corrupted_manifests(dataset, split, repeats, seed, backgrounds, Path(out_dir),
                                                  protocol, fold)
        else:
            made[name] = make_variant_manifests(dataset, name, variant_dir(Path(out_dir), name), split,
                                                repeats, seed, protocol, fold)
    return made


def variant_repeats(name: str, repeats: int) -> int:
    """How many sets variant ``name`` has for ``repeats`` asked: all of them where a donor is drawn, else the
    one fixed set."""
    return repeats if variant(name).donor is not None else 1


def variant_dir(folder: Path, name: str) -> Path:
    """Where variant ``name``'s manifests go beside the paper's repeats in ``folder``."""
    return Path(folder) / variant(name).name


# ------------------------------------------------------------------------------------------------- sampling
def variant_rng(seed: int, repeat: int, name: str, image_id: str) -> np.random.Generator:
    """A generator owned by one image of one repeat of one variant (its draw independent of the others)."""
    keys = [int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")
            for text in (name, image_id)]
    return np.random.default_rng(np.random.SeedSequence([seed, repeat, *keys]))


def sample_entries(items: Sequence[Item], name: str, seed: int, repeat: int) -> list[VariantEntry]:
    """Every item's entry; a mixed variant's donor drawn from the item's own generator: mixed-same another
    image of its class (itself where there is none), mixed-rand a class other than its own, then an image."""
    kind = variant(name)
    if kind.donor is None:
        return [VariantEntry(item.id) for item in items]
    members: dict[int, list[str]] = {}
    for item in items:
        members.setdefault(item.label, []).append(item.id)
    labels = sorted(members)
    if kind.donor == "other" and len(labels) < 2:
        raise OptionError(f"the {name} variant needs images of at least two classes, the split has one",
                          fix="leave out the mixed-rand variant for this split")
    position = {image_id: index for ids in members.values() for index, image_id in enumerate(ids)}
    label_index = {label: index for index, label in enumerate(labels)}
    entries = []
    for item in items:
        rng = variant_rng(seed, repeat, name, item.id)
        if kind.donor == "same":
            classmates = members[item.label]
            if len(classmates) == 1:
                donor = item.id
            else:  # uniform over the others: draw among n - 1 and step over the image itself
                index = int(rng.integers(len(classmates) - 1))
                donor = classmates[index + (index >= position[item.id])]
        else:
            index = int(rng.integers(len(labels) - 1))  # uniform over the other classes, likewise
            others = members[labels[index + (index >= label_index[item.label])]]
            donor = others[int(rng.integers(len(others)))]
        entries.append(VariantEntry(item.id, donor))
    return entries


# ------------------------------------------------------------------------------------------------- making
def make_variant_manifests(
    dataset: Dataset,
    name: str,
    out_dir: Path,
    split: str = "test",
    repeats: int = 5,
    seed: int = 0,
    protocol: str = "fixed",
    fold: int = 0,
    geometry: EvalGeometry | None = None,
) -> list[Path]:
    """Write variant ``name``'s manifests of one split into ``out_dir`` (``repeat-0.json`` …, as many as
    :func:`variant_repeats`) and return their paths; repeat ``r`` of a seed is the same whatever
    ``repeats`` is."""
    kind = variant(name)
    check_corrupted_split(split)
    if repeats < 1 or seed < 0:
        raise OptionError(f"a variant needs at least 1 repeat and a seed >= 0, got {repeats} and {seed}",
                          fix="pass --repeats 1 or more and a non-negative --seed")
    geometry = geometry if geometry is not None else eval_geometry(dataset.name)
    items = split_items(dataset, split, protocol, fold)
    count = variant_repeats(name, repeats)
    paths = [Path(out_dir) / manifest_name(r) for r in range(count)]
    sweep_stale_temps(paths, older_than=SHARED_TEMP_AGE_S)
    for repeat, path in enumerate(paths):
        header = {
            "format": VARIANT_FORMAT, "version": VARIANT_VERSION, "variant": kind.name, "rule": kind.rule,
            "dataset": dataset.name, "split": split, "protocol": protocol, "fold": fold, "count": len(items),
            "ids_sha256": ids_sha256(items), "seed": seed, "repeat": repeat, "geometry": geometry.as_dict(),
        }
        write_text_atomic(path, _manifest_text(header, sample_entries(items, name, seed, repeat)))
    return paths


def _manifest_text(header: dict[str, Any], entries: Sequence[VariantEntry]) -> str:
    """Stable JSON, as the corrupted sets' manifests: the header indented, then one line per image."""
    header_text = json.dumps(header, indent=2, sort_keys=True, ensure_ascii=False).replace("\n", "\n  ")
    lines = [json.dumps(e.as_dict(), ensure_ascii=False) for e in entries]
    return '{\n  "header": ' + header_text + ',\n  "images": [\n    ' + ",\n    ".join(lines) + "\n  ]\n}\n"


def ensure_variant_manifests(
    dataset: Dataset,
    name: str,
    folder: Path,
    split: str,
    repeats: int,
    seed: int,
    protocol: str,
    fold: int,
    geometry: EvalGeometry,
) -> list[VariantManifest]:
    """Variant ``name``'s sets of the split at ``geometry`` from ``folder``, made there first where any is
    missing. Existing ones are loaded (and so checked) before any is written; each must be the seed, split
    and repeat its file name stands for."""
    paths = [Path(folder) / manifest_name(r) for r in range(variant_repeats(name, repeats))]
    loaded = {path: load_variant_manifest(path, dataset, geometry) for path in paths if path.is_file()}
    for repeat, path in enumerate(paths):
        manifest = loaded.get(path)
        if manifest is None:
            continue
        found = (manifest.variant.name, manifest.split, manifest.repeat, manifest.seed)
        if found != (name, split, repeat, seed):
            raise AssetError(
                f"the file is named for repeat {repeat} of the {name} variant of the {split} split, seed "
                f"{seed}, but holds repeat {manifest.repeat} of the {manifest.variant.name} variant of the "
                f"{manifest.split} split, seed {manifest.seed}",
                path=path,
                fix="use a manifests folder made by bgbias corrupt for this split and seed, without renamed "
                    "files",
            )
    if len(loaded) < len(paths):
        make_variant_manifests(dataset, name, folder, split, repeats, seed, protocol, fold, geometry)
    return [load_variant_manifest(path, dataset, geometry) for path in paths]


# ------------------------------------------------------------------------------------------------- loading
def load_variant_manifest(
    path: Path, dataset: Dataset, geometry: EvalGeometry | None = None
) -> VariantManifest:
    """Read a variant manifest, check every field, and check it still describes ``dataset``'s split at the
    evaluation ``geometry`` (default the dataset's): its images, and donors of the classes its rule says."""
    manifest = _parse(Path(path))
    remake = f"make it again: {remake_command(manifest, dataset.name)}"
    items = check_describes_split(manifest, dataset, geometry, remake)
    _check_donors(manifest, {item.id: item.label for item in items}, remake)
    return manifest


def _check_donors(manifest: VariantManifest, label_of: dict[str, int], remake: str) -> None:
    """Every donor is an image of the split, of the image's class (mixed-same) or of another (mixed-rand)."""
    same = manifest.variant.donor == "same"
    sizes = Counter(label_of.values())
    for index, entry in enumerate(manifest.entries):
        if entry.donor is None:
            continue
        if entry.donor not in label_of:
            raise AssetError(f"images[{index}] names donor {entry.donor!r}, which is not in the split",
                             path=manifest.path, fix=remake)
        own, theirs = label_of[entry.id], label_of[entry.donor]
        fits = (theirs == own and (entry.donor != entry.id or sizes[own] == 1)) if same else theirs != own
        if not fits:
            raise AssetError(
                f"images[{index}] names donor {entry.donor!r} of class {theirs}, which the "
                f"{manifest.variant.name} rule does not allow for an image of class {own}",
                path=manifest.path, fix=remake,
            )


def _parse(path: Path) -> VariantManifest:
    """A manifest whose every field has the type and range ``make_variant_manifests`` writes, made by the
    current rule of its variant; ``AssetError`` naming the field otherwise."""
    data, digest = read_json(path)
    check_keys(data, ("header", "images"), "the manifest", path)
    header, images = data["header"], data["images"]
    if not isinstance(header, dict) or header.get("format") != VARIANT_FORMAT:
        raise AssetError("not a bgbias variant-set manifest", path=path, fix=DAMAGED)
    if not is_int(header.get("version")) or header["version"] != VARIANT_VERSION:
        raise AssetError(f"manifest version {header.get('version')!r} is not {VARIANT_VERSION}", path=path,
                         fix=DAMAGED)
    check_keys(header, _HEADER_KEYS, "header", path)
    kind = VARIANTS[text_field(header["variant"], "header.variant", path, tuple(VARIANTS))]
    if header["rule"] != kind.rule:
        raise bad_field("header.rule", f"the current rule of {kind.name}: {kind.rule}", header["rule"], path)
    split = text_field(header["split"], "header.split", path, CORRUPTED_SPLITS)
    protocol = text_field(header["protocol"], "header.protocol", path, PROTOCOLS)
    geometry = parse_geometry(header, path)
    if not isinstance(images, list):
        raise bad_field("images", "a list", images, path)
    keys = ("id",) if kind.donor is None else ("id", "donor")
    entries = []
    for index, raw in enumerate(images):
        check_keys(raw, keys, f"images[{index}]", path)
        donor = text_field(raw["donor"], f"images[{index}].donor", path) if kind.donor else None
        entries.append(VariantEntry(text_field(raw["id"], f"images[{index}].id", path), donor))
    check_image_list(header, [e.id for e in entries], path)
    folds = 1 if protocol == "fixed" else CV_FOLDS
    return VariantManifest(
        path=path,
        sha256=digest,
        variant=kind,
        dataset=text_field(header["dataset"], "header.dataset", path),
        split=split,
        protocol=protocol,
        fold=int_field(header["fold"], "header.fold", path, high=folds - 1),
        seed=int_field(header["seed"], "header.seed", path),
        repeat=int_field(header["repeat"], "header.repeat", path),
        geometry=geometry,
        entries=tuple(entries),
    )
