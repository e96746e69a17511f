"""A study's ``prepare`` step on the bench: the assets, the background pools, the bench of the study's
settings and, where the study uses them, its exact masks."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bgbias.assets.catalog import DEFAULT_ASSETS
from bgbias.assets.fetch import fetch
from bgbias.assets.store import asset_dir
from bgbias.backgrounds.pool import POOL_SEED, assign_families, build_pools
from bgbias.backgrounds.sources import background_sources
from bgbias.bench.build import BENCH_FORMAT, build_bench
from bgbias.data.registry import default_root, open_dataset
from bgbias.errors import AssetError, RecordError
from bgbias.fileio import folder_lock
from bgbias.paths import backgrounds_root
from bgbias.saliency.ground_truth import copy_ground_truth_masks
from bgbias.schema import Record, read_record
from bgbias.study.spec import BENCH_MASKS, StudySpec


def prepare_pools(out: str | os.PathLike[str] | None = None, *, seed: int = POOL_SEED) -> dict[str, Any]:
    """Complete ``out/train`` and ``out/test`` (default ``./backgrounds``) from the installed photos."""
    return build_pools(backgrounds_root() if out is None else Path(out), _installed_sources(), seed)


def prepare_bench(
    out: str | os.PathLike[str] | None = None,
    *,
    preset: str = "small",
    rho: float = 0.9,
    seed: int = 0,
) -> dict[str, Any]:
    """Build the bench into ``out`` (default ``<data-root>/bench``) from the installed stamps and scenes (the
    background families' ``"bench"`` share, disjoint from both pools)."""
    stamps = asset_dir("tuxpaint_stamps") / "stamps"
    scenes = assign_families(_installed_sources())["bench"]
    target = default_root("bench") if out is None else Path(out)
    summary = build_bench(target, stamps, scenes, rho=rho, seed=seed, preset=preset)
    return {"root": str(target), "preset": preset, "seed": seed, **summary}


def built_bench(root: Path, *, preset: str, rho: float, seed: int) -> dict[str, Any] | None:
    """The summary of the bench at ``root`` when its ``bench.json`` states its format and these settings, else
    None (then the bench is built again). A matching bench is kept: rebuilding gives the same bytes but new
    files, which would void the masks and embeddings made of them."""
    try:
        description = read_record(root / "bench.json", BenchDescription, what="the bench's description",
                                  fix="re-run `bgbias assets bench`", file_format=BENCH_FORMAT)
    except RecordError:
        return None
    parameters = description.parameters
    if (parameters.preset, parameters.rho, parameters.seed) != (preset, rho, seed):
        return None
    return {"root": str(root), "preset": preset, "seed": seed, **description.summary}


class BenchParameters(Record):
    preset: str
    rho: float
    seed: int


class BenchDescription(Record):
    """``bench.json`` as the study reads it back: the settings it was built with and its summary."""

    parameters: BenchParameters
    summary: dict[str, Any]


def prepare_study_bench(spec: StudySpec, log: Callable[[str], None]) -> None:
    """The assets (verified), the pools, the bench of the spec's settings (kept when it matches) and, for a
    study on its exact masks (its own or the second source), those masks laid out."""
    assert spec.bench is not None
    preset, rho, seed = spec.bench.preset, spec.bench.rho, spec.bench.seed
    log("fetching assets (verified against pinned checksums)")
    fetch(DEFAULT_ASSETS)
    log("completing the background pools")
    prepare_pools()
    root = Path(spec.root)
    # Another study building this bench or its masks is waited for, and what it made is then kept.
    with folder_lock(root):
        if built_bench(root, preset=preset, rho=rho, seed=seed) is None:
            log(f"building the bench (preset {preset}, rho {rho:g}, seed {seed}) in {root}")
            prepare_bench(root, preset=preset, rho=rho, seed=seed)
        else:
            log(f"the bench at {root} is up to date (preset {preset}, rho {rho:g}, seed {seed})")
        if spec.masks == BENCH_MASKS:
            log("the bench's exact masks, laid out for BGAugment and the corrupted sets")
            copy_ground_truth_masks(open_dataset("bench", root).items(), Path(spec.masks_dir))
        if spec.compare_masks == BENCH_MASKS and spec.compare_masks_dir is not None:
            log("the bench's exact masks, laid out for the corrupted sets cut out with the second masks")
            copy_ground_truth_masks(open_dataset("bench", root).items(), Path(spec.compare_masks_dir))


def _installed_sources() -> list[Any]:
    sources = background_sources()
    if not sources:
        raise AssetError(
            "no background photographs are installed",
            fix="run `bgbias assets fetch` (offline: add --from DIR holding the .deb archives)",
        )
    return sources
