"""The main job on the embedded default: the paper's whole measurement on the bench, from nothing to Table 1.

Steps: provision the assets, complete the background pools, build the bench, make its U²-Net masks, train the
study's method without and with BGAugment, score both on the clean test split and its fixed corrupted repeats,
compute their foreground scores, and put everything in one report. Each step is also a command of its own
(``bgbias assets``, ``masks``, ``train``, ``eval``, ``explain``, ``report``), and each is resumable: a second
run reuses the bench, the masks, finished trainings and cached embeddings, and resumes a killed training.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bgbias.errors import AssetError

POOL_SEED = 0
"""Seed of the committed pools: their generated images are in the repository, so the study never reseeds
them."""


STUDY_METHOD = "multi_similarity"
"""The study's loss: Multi-Similarity, the loss of the paper's Table 1 that the bench prototype used."""
REPEATS = 5
EXPLAIN_IMAGES = 200
"""Test images whose attribution maps are scored (25 backward passes each); spread evenly over the split."""


@dataclass(frozen=True)
class StudyResult:
    assets: list[Any]  # AssetStatus rows
    pools: dict[str, Any]  # the pools' manifest
    bench: dict[str, Any]  # the bench's summary
    masks: Any  # MaskRun
    runs: list[Path]  # vanilla, then BGAugment
    report: dict[str, Path]  # the runs report's files


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


def run_study(
    *,
    preset: str = "small",
    rho: float = 0.9,
    seed: int = 0,
    home: str | os.PathLike[str] | None = None,
    runs: str | os.PathLike[str] | None = None,
    device: str = "auto",
    log: Callable[[str], None] = print,
) -> StudyResult:
    """Run every step of the study (module docstring); ``runs`` defaults to ``./runs``, the study's runs go
    to ``<runs>/study/bench-<preset>-rho<rho>-seed<seed>/``."""
    from bgbias.assets.catalog import DEFAULT_ASSETS
    from bgbias.assets.fetch import fetch
    from bgbias.data.items import default_masks_dir
    from bgbias.data.registry import default_root, open_dataset
    from bgbias.paths import runs_root
    from bgbias.report.compare import compare_runs
    from bgbias.report.runs_table import collect_runs, write_runs_report
    from bgbias.saliency.pipeline import make_masks

    log("1/7 fetching assets (verified against pinned checksums)")
    assets = fetch(DEFAULT_ASSETS, home=home)
    log("2/7 completing the background pools")
    pools = prepare_pools(home=home)
    bench = built_bench(default_root("bench"), preset=preset, rho=rho, seed=seed)
    if bench is None:
        log(f"3/7 building the bench (preset {preset}, rho {rho}, seed {seed})")
        bench = prepare_bench(preset=preset, rho=rho, seed=seed, home=home)
    else:
        log(f"3/7 the bench at {bench['root']} is up to date (preset {preset}, rho {rho}, seed {seed})")
    dataset = open_dataset("bench")
    log("4/7 U²-Net masks of the bench (u2netp; kept when already made)")
    masks = make_masks(dataset.items(), default_masks_dir(dataset), model="u2netp")
    if masks.failed:
        raise AssetError(f"{masks.failed} bench image(s) got no mask", path=masks.manifest,
                         fix="see the failures in the manifest, then run `bgbias study` again")
    runs = Path(runs) if runs is not None else runs_root()
    folder = runs / "study" / f"bench-{preset}-rho{rho}-seed{seed}"
    run_dirs = [train_study_run(folder, bgaugment, device, log, "5/7") for bgaugment in (False, True)]
    log(f"6/7 evaluating both runs on the clean test split and {REPEATS} corrupted repeats, then their "
        f"foreground scores on {EXPLAIN_IMAGES} test images")
    for run_dir in run_dirs:
        measure_run(run_dir, device, log)
    log("7/7 the report")
    reports, foreground = collect_runs(run_dirs)
    report = write_runs_report(reports, foreground, folder / "report")
    for number, gallery in enumerate(compare_runs(run_dirs, "test", folder / "report")):
        report[f"foreground_gallery_{number}"] = gallery
    return StudyResult(assets, pools, bench, masks, run_dirs, report)


def train_study_run(
    folder: Path, bgaugment: bool, device: str, log: Callable[[str], None], step: str
) -> Path:
    """Train (or resume, or keep) the study's run with or without BGAugment; return its folder."""
    from bgbias.engine.config import resolve_config
    from bgbias.engine.run_dir import DONE, open_run_dir, read_record
    from bgbias.engine.training import resume_training, train

    run_dir = folder / f"{STUDY_METHOD}{'-bgaugment' if bgaugment else ''}"
    name = f"{STUDY_METHOD}{' + BGAugment' if bgaugment else ''}"
    if (run_dir / "config.json").is_file():
        # A missing or damaged run.json reads as unfinished: resuming from the checkpoints writes it again.
        status = (read_record(open_run_dir(run_dir)) or {}).get("status")
        if status in DONE:
            log(f"{step} {name}: trained already ({run_dir})")
            return run_dir
        log(f"{step} resuming {name} ({run_dir})")
        resume_training(run_dir)
        return run_dir
    log(f"{step} training {name} on the bench")
    config = resolve_config(STUDY_METHOD, "bench", options={"bgaugment.enabled": bgaugment, "device": device})
    train(config, run_dir=run_dir)
    return run_dir


def measure_run(run_dir: Path, device: str, log: Callable[[str], None]) -> None:
    """``bgbias eval --corrupted --repeats 5`` and ``bgbias explain`` of one study run."""
    from bgbias.engine.request import MeasureRequest
    from bgbias.engine.trained import load_trained
    from bgbias.explain.run import explain
    from bgbias.report.evaluate import evaluate

    trained = load_trained(run_dir, device=device)
    request = MeasureRequest(corrupted=True, repeats=REPEATS, limit=EXPLAIN_IMAGES)
    evaluate(trained, request, log=log)
    explain(trained, request, log=log)


def _installed_sources(home: str | os.PathLike[str] | None) -> list[Any]:
    from bgbias.backgrounds.sources import background_sources

    sources = background_sources(home)
    if not sources:
        raise AssetError(
            "no background photographs are installed",
            fix="run `bgbias assets fetch` (offline: add --from DIR holding the .deb archives)",
        )
    return sources
