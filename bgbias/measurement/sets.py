"""The image sets an evaluation scores beside the clean split: the paper's corrupted repeats and the profile's
variant sets, each fixed by a manifest, in the order the evaluation scores them. A model's evaluation and
``bgbias score --embeddings`` both take the sets from here, so they agree on which sets exist, their order
and their images.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from bgbias.bgaugment.mask_check import empty_masks, saliency_masks
from bgbias.corrupted.corrupted_images import CorruptedImages
from bgbias.corrupted.manifest_store import manifest_exists
from bgbias.corrupted.manifests import (
    default_manifest_dir,
    ensure_manifests,
    load_manifest,
    make_corrupted_manifests,
    manifest_name,
    repeat_paths,
)
from bgbias.engine.embedding_cache import files_fingerprint
from bgbias.measurement.mask_sensitivity import ComparedSets, compared_sets
from bgbias.saliency.records import masks_record
from bgbias.variants.variant_images import VariantImages
from bgbias.variants.variant_manifests import (
    VariantManifest,
    ensure_variant_manifests,
    variant_dir,
    variant_repeats,
)
from bgbias.variants.variants import VARIANTS

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

    from bgbias.corrupted.manifests import CorruptedManifest
    from bgbias.data.items import Dataset, Item
    from bgbias.data.transforms import EvalGeometry
    from bgbias.measurement.request import MeasureRequest, ResolvedRequest

CLEAN = "clean"
"""The layout name of the clean split."""


class SetStates(Protocol):
    """Where an evaluation gets each set's per-image state: the model through its cache
    (:class:`~bgbias.engine.split_states.SplitStates`), or files of precomputed embeddings."""

    labels: np.ndarray

    def clean(self) -> dict[str, np.ndarray]:
        """The state of the clean split."""
        ...

    def state(self, images: Any, key: dict[str, Any], desc: str) -> dict[str, np.ndarray]:
        """The state of ``images``, a set ``key`` describes (``set``, ``manifest_sha256``, ``masks``)."""
        ...


@dataclass(frozen=True)
class EvaluationSets:
    """The corrupted repeats (the paper's, then the extra ones of the profile's worst case) and the profile's
    variant sets of a split, with the masks they are made from (``masks_print``: their files' fingerprint;
    ``empty_masks``: the ids of the images whose mask shows no object; both None without corrupted sets), and
    the paper's repeats cut out with a second source's masks where asked (``compared``)."""

    masks_dir: Path
    corrupted: list[tuple[CorruptedManifest, CorruptedImages]]
    variants: list[VariantImages]
    masks_print: str | None
    empty_masks: list[str] | None = None
    compared: ComparedSets | None = None

    def corrupted_meta(self, seed: int, repeats: int) -> dict[str, Any]:
        """The corrupted sets as the report's ``corrupted_sets`` records them: ``seed``, pool, masks (the
        folder and what made them) and the manifests of the paper's ``repeats``."""
        first = self.corrupted[0][0]
        return {"seed": seed, "pool": str(first.pool_dir), "pool_images": len(first.pool),
                **masks_record(self.masks_dir), "manifests": self._manifest_records()[:repeats]}

    def worst_case_manifests(self, repeats: int, worst_k: int) -> list[dict[str, Any]]:
        """The manifests of the repeats only the profile's worst case embeds, as its record lists them."""
        return [{"set": "random-bg", **record} for record in self._manifest_records()[repeats:worst_k]]

    def _manifest_records(self) -> list[dict[str, Any]]:
        return [{"repeat": m.repeat, "path": str(m.path), "sha256": m.sha256} for m, _ in self.corrupted]


def evaluation_sets(resolved: ResolvedRequest) -> EvaluationSets:
    """The sets a resolved request scores: its corrupted repeats and, with the profile, the worst case's extra
    repeats and every variant's sets; their manifests made where missing."""
    request, dataset, items = resolved.request, resolved.dataset, resolved.items
    masks_dir = resolved.masks_dir
    if not (request.corrupted or request.profile):
        return EvaluationSets(masks_dir, [], [], None)
    protocol, fold, geometry, split = resolved.protocol, resolved.fold, resolved.geometry, resolved.split
    # The profile's worst case takes the first worst_k repeats, the paper's among them.
    manifests = corrupted_manifests(dataset, split, corrupted_count(request), request.seed,
                                    request.backgrounds, request.manifests, protocol, fold, geometry)
    corrupted = [(manifest, CorruptedImages(items, manifest, masks_dir, dataset.name))
                 for manifest in manifests]
    masks_print = files_fingerprint(saliency_masks(items, masks_dir, dataset.name))
    variants = (variant_sets(dataset, items, manifests[0].path.parent, split, request.repeats,
                             request.seed, protocol, fold, geometry, masks_dir) if request.profile else [])
    compared = None if request.compare_masks is None else compared_sets(
        items, manifests[:request.repeats], masks_dir, Path(request.compare_masks), dataset.name, geometry)
    return EvaluationSets(masks_dir, corrupted, variants, masks_print, empty_masks(items, masks_dir),
                          compared)


def corrupted_manifests(
    dataset: Dataset,
    split: str,
    repeats: int,
    seed: int,
    backgrounds: str | os.PathLike[str] | None,
    folder: str | os.PathLike[str] | None,
    protocol: str,
    fold: int,
    geometry: EvalGeometry,
) -> list[CorruptedManifest]:
    """Repeats ``0 … repeats-1`` of the split's corrupted sets at ``geometry``, made first where missing (as
    :func:`~bgbias.corrupted.manifests.ensure_manifests` checks and makes them)."""
    pool = Path(backgrounds) if backgrounds is not None else None
    if folder is None:
        folder = default_manifest_dir(dataset, split, seed, protocol, fold, geometry)
    folder = Path(folder)
    return ensure_manifests(
        folder, repeats, split, seed, None,
        load=lambda path: load_manifest(path, dataset, pool, geometry),
        make=lambda: make_corrupted_manifests(dataset, split, repeats, seed, pool, folder, protocol, fold,
                                              geometry),
    )


def variant_sets(
    dataset: Dataset,
    items: Sequence[Item],
    folder: Path,
    split: str,
    repeats: int,
    seed: int,
    protocol: str,
    fold: int,
    geometry: EvalGeometry,
    masks_dir: Path,
) -> list[VariantImages]:
    """Every variant's sets of the split, their manifests in ``folder/<variant>`` (the paper's repeats'
    folder), made there where missing; loaded and checked before anything is embedded."""
    return [
        VariantImages(items, manifest, masks_dir, dataset.name)
        for name in VARIANTS
        for manifest in ensure_variant_manifests(dataset, name, variant_dir(folder, name), split, repeats,
                                                 seed, protocol, fold, geometry)
    ]


def corrupted_count(request: MeasureRequest) -> int:
    """How many corrupted repeats ``request`` embeds: its ``repeats``, and with the profile at least
    ``worst_k``."""
    return max(request.repeats, request.worst_k) if request.profile else request.repeats


def missing_manifests(resolved: ResolvedRequest) -> list[Path]:
    """The manifests of the sets a resolved request scores that are not on disk (:func:`evaluation_sets`
    would make them), in scoring order."""
    request = resolved.request
    if not (request.corrupted or request.profile):
        return []
    folder = Path(request.manifests) if request.manifests is not None else default_manifest_dir(
        resolved.dataset, resolved.split, request.seed, resolved.protocol, resolved.fold, resolved.geometry)
    paths = repeat_paths(folder, corrupted_count(request))
    if request.profile:
        paths += [path for name in VARIANTS
                  for path in repeat_paths(variant_dir(folder, name), variant_repeats(name, request.repeats))]
    return [path for path in paths if not manifest_exists(path)]


def layout_name(manifest: CorruptedManifest | VariantManifest) -> str:
    """A set's name as ``bgbias corrupt --render`` names its folder: ``repeat-<r>`` for the paper's repeats,
    ``<variant>/repeat-<r>`` for a variant's."""
    stem = manifest_name(manifest.repeat).removesuffix(".json")
    return f"{manifest.variant.name}/{stem}" if isinstance(manifest, VariantManifest) else stem
