"""Steps 1–4 of a study: the assets, the background pools, the bench of the study's settings and its masks."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bgbias.errors import AssetError
from bgbias.fileio import folder_lock

POOL_SEED = 0
"""Seed of the committed pools: their generated images are in the repository, so the study never reseeds
them."""


@dataclass(frozen=True)
class StudyBench:
    """Steps 1–4 of a study, done: the assets, the pools, the bench (its summary and folder) and its masks."""

    assets: list[Any]  # AssetStatus rows
    pools: dict[str, Any]  # the pools' manifest
    bench: dict[str, Any]  # the bench's summary
    root: Path
    masks: Any  # MaskRun, or GroundTruthCopy for the exact masks
    masks_dir: Path


def prepare_pools(
    out: str | os.PathLike[str] | None = None,
    *,
    seed: int = POOL_SEED,
    home: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Complete ``out/train`` and ``out/test`` (default ``./backgrounds``) from the installed photos."""
    from bgbias.backgrounds.pool import build_pools
    from bgbias.paths import backgrounds_root

    return build_pools(backgrounds_root() if out is None else Path(out), _installed_sources(home), seed)


def prepare_bench(
    out: str | os.PathLike[str] | None = None,
    *,
    preset: str = "small",
    rho: float = 0.9,
    seed: int = 0,
    home: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Build the bench into ``out`` (default ``<data-root>/bench``) from the installed stamps and scenes.

    The bench's scenes are the ``"bench"`` share of the background families, disjoint from both pools.
    """
    from bgbias.assets.store import asset_dir
    from bgbias.backgrounds.pool import assign_families
    from bgbias.bench.build import build_bench
    from bgbias.data.registry import default_root

    stamps = asset_dir("tuxpaint_stamps", home) / "stamps"
    scenes = assign_families(_installed_sources(home))["bench"]
    target = default_root("bench") if out is None else Path(out)
    summary = build_bench(target, stamps, scenes, rho=rho, seed=seed, preset=preset)
    return {"root": str(target), "preset": preset, "seed": seed, **summary}


def study_bench_root(preset: str, rho: float, seed: int) -> Path:
    """Where a study keeps the bench of these settings: ``<data-root>/bench`` for the default ones (small,
    ρ 0.9, seed 0), ``<data-root>/bench-<preset>-rho<rho>-seed<seed>`` for others, so that the dial's benches
    (and their masks and runs) live side by side instead of replacing one another."""
    from bgbias.data.registry import default_root

    default = default_root("bench")
    if (preset, rho, seed) == ("small", 0.9, 0):
        return default
    return default.with_name(f"bench-{preset}-rho{rho:g}-seed{seed}")


def built_bench(root: Path, *, preset: str, rho: float, seed: int) -> dict[str, Any] | None:
    """The summary of the bench at ``root`` when it was built by this format with these settings, else None.

    Rebuilding would give the same bytes but new files, which would void the masks and embeddings made of
    them; the study therefore keeps a bench that matches.
    """

    from bgbias.bench.build import BENCH_FORMAT

    try:
        description = json.loads((root / "bench.json").read_text(encoding="utf-8"))
        parameters = description["parameters"]
        if description["format"] != BENCH_FORMAT or (parameters["preset"], parameters["rho"],
                                                     parameters["seed"]) != (preset, rho, seed):
            return None
        return {"root": str(root), "preset": preset, "seed": seed, **description["summary"]}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def prepare_study_bench(
    masks: str,
    preset: str,
    rho: float,
    seed: int,
    home: str | os.PathLike[str] | None,
    log: Callable[[str], None],
) -> StudyBench:
    """Steps 1–4: the assets (verified), the pools, the bench of these settings (kept when it matches) and
    its masks from ``masks`` (:data:`~bgbias.study.plan.MASK_SOURCES`)."""
    from bgbias.assets.catalog import DEFAULT_ASSETS
    from bgbias.assets.fetch import fetch
    from bgbias.data.registry import open_dataset

    log("1/7 fetching assets (verified against pinned checksums)")
    assets = fetch(DEFAULT_ASSETS, home=home)
    log("2/7 completing the background pools")
    pools = prepare_pools(home=home)
    root = study_bench_root(preset, rho, seed)
    # Another study building this bench or its masks is waited for, and what it made is then kept.
    with folder_lock(root):
        bench = built_bench(root, preset=preset, rho=rho, seed=seed)
        if bench is None:
            log(f"3/7 building the bench (preset {preset}, rho {rho:g}, seed {seed}) in {root}")
            bench = prepare_bench(root, preset=preset, rho=rho, seed=seed, home=home)
        else:
            log(f"3/7 the bench at {root} is up to date (preset {preset}, rho {rho:g}, seed {seed})")
        made, masks_dir = bench_masks(open_dataset("bench", root), masks, log)
    return StudyBench(assets, pools, bench, root, made, masks_dir)


def bench_masks(dataset: Any, source: str, log: Callable[[str], None]) -> tuple[Any, Path]:
    """The bench's masks from ``source`` (:data:`~bgbias.study.plan.MASK_SOURCES`), made or laid out where
    missing: the ``MaskRun`` or ``GroundTruthCopy`` and the folder."""
    from bgbias.data.items import default_masks_dir
    from bgbias.saliency.ground_truth import copy_ground_truth_masks, default_ground_truth_dir
    from bgbias.saliency.pipeline import make_masks

    if source == "ground-truth":
        log("4/7 the bench's exact masks, laid out for BGAugment and the corrupted sets")
        copied = copy_ground_truth_masks(dataset.items(), default_ground_truth_dir(dataset))
        return copied, copied.out_dir
    log("4/7 U²-Net masks of the bench (u2netp; kept when already made)")
    masks = make_masks(dataset.items(), default_masks_dir(dataset), model="u2netp")
    if masks.failed:
        raise AssetError(f"{masks.failed} bench image(s) got no mask", path=masks.manifest,
                         fix="see the failures in the manifest, then run `bgbias study` again")
    return masks, default_masks_dir(dataset)


def _installed_sources(home: str | os.PathLike[str] | None) -> list[Any]:
    from bgbias.backgrounds.sources import background_sources

    sources = background_sources(home)
    if not sources:
        raise AssetError(
            "no background photographs are installed",
            fix="run `bgbias assets fetch` (offline: add --from DIR holding the .deb archives)",
        )
    return sources
