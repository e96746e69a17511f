"""The main job on the embedded default: provision the assets, complete the background pools, build the bench.

Each step is also a command of its own (``bgbias assets fetch|backgrounds|bench``); later stages (masks,
training, evaluation, report) extend :func:`run_study` as they land.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bgbias.errors import AssetError

POOL_SEED = 0
"""Seed of the committed pools: their generated images are in the repository, so the study never reseeds
them."""


@dataclass(frozen=True)
class StudyResult:
    assets: list[Any]  # AssetStatus rows
    pools: dict[str, Any]  # the pools' manifest
    bench: dict[str, Any]  # the bench's summary


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


def run_study(
    *,
    preset: str = "small",
    rho: float = 0.9,
    seed: int = 0,
    home: str | os.PathLike[str] | None = None,
    log: Callable[[str], None] = print,
) -> StudyResult:
    """Fetch the default assets, complete the pools and build the bench; return what each step produced."""
    from bgbias.assets.catalog import DEFAULT_ASSETS
    from bgbias.assets.fetch import fetch

    log("1/3 fetching assets (verified against pinned checksums)")
    assets = fetch(DEFAULT_ASSETS, home=home)
    log("2/3 completing the background pools")
    pools = prepare_pools(home=home)
    log(f"3/3 building the bench (preset {preset}, rho {rho}, seed {seed})")
    bench = prepare_bench(preset=preset, rho=rho, seed=seed, home=home)
    return StudyResult(assets=assets, pools=pools, bench=bench)


def _installed_sources(home: str | os.PathLike[str] | None) -> list[Any]:
    from bgbias.assets.store import background_sources

    sources = background_sources(home)
    if not sources:
        raise AssetError(
            "no background photographs are installed",
            fix="run `bgbias assets fetch` (offline: add --from DIR holding the .deb archives)",
        )
    return sources
