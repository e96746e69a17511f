"""Fixed variant sets of the background-reliance profile: one JSON manifest per (variant, seed, repeat), in
``<manifest folder>/<variant>/repeat-<r>.json``, made and checked as the corrupted sets' are
(:mod:`bgbias.corrupted.manifests`). A mixed variant's donor is drawn from a stream keyed by (seed, repeat,
variant, image id), so it depends neither on order nor on the number of repeats; variants without a donor are
one fixed set (repeat 0).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from bgbias.bgaugment.background_crops import image_rng
from bgbias.corrupted.manifest_schema import (
    ManifestFile,
    ManifestHeader,
    SplitManifest,
    Text,
    bad_field,
    check_fields,
    check_manifest,
    manifest_text,
    read_manifest,
    shown,
    split_fields,
)
from bgbias.corrupted.manifests import (
    check_describes_split,
    default_manifest_dir,
    ensure_manifests,
    make_corrupted_manifests,
    remake_command,
    split_skeleton,
    write_repeats,
)
from bgbias.data.items import Dataset, Item
from bgbias.data.transforms import EvalGeometry
from bgbias.errors import AssetError, OptionError
from bgbias.schema import FORMAT_VERSION, ClosedRecord
from bgbias.variants.variants import VARIANTS, Variant, variant

VARIANT_FORMAT = "bgbias-variant-manifest"
PAPER_SET = "random-bg"
"""The paper's corrupted sets (random photographs of the pool), beside the variants."""
SET_NAMES = (PAPER_SET, *VARIANTS)


class VariantEntry(ClosedRecord):
    """One image of a variant set without a donor (a manifest's line)."""

    id: Text
    donor: ClassVar[None] = None


class DonorEntry(ClosedRecord):
    """One image of a mixed variant's set: ``donor`` is the id of the image whose background it uses."""

    id: Text
    donor: Text


class VariantHeader(ManifestHeader):
    """A variant set's header: the skeleton, the variant and the text of the rule it was made by."""

    format: Literal[VARIANT_FORMAT]
    version: Literal[FORMAT_VERSION]
    variant: Literal[tuple(VARIANTS)]
    rule: str


@dataclass(frozen=True)
class VariantManifest(SplitManifest):
    """A loaded and validated variant manifest, made by the current rule of ``variant``."""

    entries: tuple[VariantEntry | DonorEntry, ...]
    variant: Variant


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
def sample_entries(
    items: Sequence[Item], name: str, seed: int, repeat: int
) -> list[VariantEntry | DonorEntry]:
    """Every item's entry; a mixed variant's donor drawn from the item's own generator: mixed-same another
    image of its class (itself where there is none), mixed-rand a class other than its own, then an image."""
    kind = variant(name)
    if kind.donor is None:
        return [VariantEntry(id=item.id) for item in items]
    members: dict[int, list[str]] = {}
    for item in items:
        members.setdefault(item.label, []).append(item.id)
    labels = sorted(members)
    if kind.donor == "other" and len(labels) < 2:
        raise OptionError(f"the {name} variant needs images of at least two classes, the split has one",
                          fix="leave out the mixed-rand variant for this split")
    position = {image_id: index for ids in members.values() for index, image_id in enumerate(ids)}
    label_index = {label: index for index, label in enumerate(labels)}
    entries: list[VariantEntry | DonorEntry] = []
    for item in items:
        rng = image_rng(seed, repeat, name, item.id)
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
        entries.append(DonorEntry(id=item.id, donor=donor))
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
    items, skeleton = split_skeleton(dataset, split, seed, protocol, fold, geometry)

    def text(repeat: int) -> str:
        header = VariantHeader(format=VARIANT_FORMAT, variant=kind.name, rule=kind.rule, **skeleton,
                               repeat=repeat)
        return manifest_text(header, sample_entries(items, name, seed, repeat))

    return write_repeats(out_dir, variant_repeats(name, repeats), text)


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
    missing (as :func:`~bgbias.corrupted.manifests.ensure_manifests` checks and makes them)."""
    return ensure_manifests(
        folder, variant_repeats(name, repeats), split, seed, name,
        load=lambda path: load_variant_manifest(path, dataset, geometry),
        make=lambda: make_variant_manifests(dataset, name, folder, split, repeats, seed, protocol, fold,
                                            geometry),
    )


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
    current rule of its variant; ``AssetError`` naming the field otherwise. Its lines are read as its
    variant's: with a donor for a mixed variant, without one otherwise."""
    data, digest = read_manifest(path, VARIANT_FORMAT, "the variant-set manifest")
    kind = VARIANTS[check_fields(data, ManifestFile[VariantHeader, Any], path).header.variant]
    line = VariantEntry if kind.donor is None else DonorEntry
    manifest = check_manifest(data, ManifestFile[VariantHeader, line], path)
    header = manifest.header
    if header.rule != kind.rule:
        raise bad_field("header.rule", f"the current rule of {kind.name}: {kind.rule}", shown(header.rule),
                        path)
    return VariantManifest(**split_fields(manifest, path, digest), variant=kind)
