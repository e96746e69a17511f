"""Build the bench: Tux Paint photo cut-outs composited on real scenes, with exact masks and home scenes
(docs/bench-dataset.md). One stamp is one class; each view shows the class's *home* background (slightly
shifted and zoomed) with probability ρ, else a random scene crop: SOP's per-class shared context. Every view's
randomness comes from (seed, class, view), so the files do not depend on the order or number of workers.
"""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import PIL
from PIL import Image

import bgbias
from bgbias.assets.digest import sha256_file
from bgbias.backgrounds.crops import crop_resized
from bgbias.backgrounds.sources import PhotoSource
from bgbias.bench.stamps import load_stamp, select_stamps
from bgbias.bench.views import VIEW_PRESETS, ViewPreset, render_view, sample_view_params
from bgbias.data.images import encoded, load_image
from bgbias.errors import AssetError, OptionError
from bgbias.fileio import atomic_dir, folder_lock, make_dirs, reporting_write_errors, write_json_atomic
from bgbias.schema import format_header

BENCH_FORMAT = "bgbias-bench"
"""The format ``bench.json`` states (:func:`~bgbias.schema.format_header`)."""


@dataclass(frozen=True)
class BenchPreset:
    """How many views of which size and difficulty each class gets."""

    views_per_class: int
    image_size: int
    view_preset: str


BENCH_PRESETS: dict[str, BenchPreset] = {
    "small": BenchPreset(views_per_class=8, image_size=128, view_preset="hard"),
    "large": BenchPreset(views_per_class=16, image_size=224, view_preset="hard"),
    "mild": BenchPreset(views_per_class=8, image_size=128, view_preset="mild"),
}
"""``small`` is the default: where the prototype saw the paper's effect (docs/bench-dataset.md)."""

SPLIT_SHARES = {"train": 0.4, "val": 0.2, "test": 0.4}
"""Share of classes in each split (at least one each); with a tenth for validation the epoch it selected was
mostly noise (docs/results.md)."""

MIN_SCENE_FAMILIES = 2
"""Fewest distinct scene pictures (families) the bench accepts: with one, every view has the same scene."""
SCENE_BOX_SIDE = (0.3, 0.7)
"""Side of a square scene crop, as a fraction of the scene's short side."""

CANVAS_FACTOR = 4
"""Scenes are decoded once at a short side of this many view sides, so every crop is a mild downscale."""

HOME_SHIFT = 0.08
HOME_ZOOM = 0.1
"""A home view moves its crop by up to ±8 % of the crop side and zooms it by up to ±10 %."""

JPEG_QUALITY = 95
INDEX_HEADER = ("image", "label", "class_name", "split", "ground_truth_mask")

_SPLIT_STREAM, _HOME_STREAM, _VIEW_STREAM = 0, 1, 2


def build_bench(
    out_dir: str | os.PathLike[str],
    stamps_root: str | os.PathLike[str],
    scene_sources: Sequence[PhotoSource],
    *,
    rho: float = 0.9,
    seed: int = 0,
    preset: str = "small",
    workers: int | None = None,
) -> dict[str, Any]:
    """Write the bench to ``out_dir`` (atomically, as a whole) and return its summary. ``scene_sources`` are
    the bench's own scenes (``assign_families(...)["bench"]``); ``workers`` processes (default: up to 2) give
    the same bytes as one; a script calling this with more needs an ``if __name__ == "__main__":`` guard.
    """
    settings = _settings(preset, rho)
    stamps = select_stamps(stamps_root)
    sources = sorted(scene_sources, key=lambda s: s.origin)
    members: dict[str, list[int]] = {}  # the indexes of each family's scenes
    for index, source in enumerate(sources):
        members.setdefault(source.family, []).append(index)
    if len(members) < MIN_SCENE_FAMILIES:
        raise AssetError(
            f"the bench needs at least {MIN_SCENE_FAMILIES} distinct scene pictures (families), "
            f"got {len(members)}",
            path=Path(sources[0].path).parent if sources else None,
            fix="install the background packages with `bgbias assets fetch`, or pass more scene sources",
        )
    splits = split_classes(len(stamps), seed)
    canvas_short = CANVAS_FACTOR * settings.image_size
    jobs = [_ClassJob(i, stamp.path, stamp.class_name, splits[i]) for i, stamp in enumerate(stamps)]
    workers = min(2, os.cpu_count() or 1) if workers is None else max(1, workers)
    # A second build of the same folder waits: both would swap it in, the second under the first's readers.
    with folder_lock(out_dir), atomic_dir(out_dir) as tmp:
        canvases = _map(_scene_canvas_task, [(s.path, canvas_short) for s in sources], workers)
        view_ranges = VIEW_PRESETS[settings.view_preset]
        context = _RenderContext(str(tmp), canvases, [members[name] for name in sorted(members)], settings,
                                 view_ranges, rho, seed)
        records = [r for rs in _map(_render_class, jobs, workers, context) for r in rs]
        records.sort(key=lambda r: r["image"])
        _write_index(tmp / "index.csv", records)
        _write_jsonl(tmp / "views.jsonl", records)
        summary = _summary(records, jobs, rho)
        description = {
            **format_header(BENCH_FORMAT),
            "parameters": {
                "preset": preset, "seed": seed, "rho": rho, "views_per_class": settings.views_per_class,
                "image_size": settings.image_size, "view_preset": settings.view_preset,
                "view_ranges": asdict(view_ranges), "split_shares": SPLIT_SHARES,
                "scene_box_side": list(SCENE_BOX_SIDE), "scene_canvas_short_side": canvas_short,
                "home_shift": HOME_SHIFT, "home_zoom": HOME_ZOOM, "jpeg_quality": JPEG_QUALITY},
            "stamps": [{"relpath": s.relpath, "class_name": s.class_name, "label": i, "split": splits[i],
                        "sha256": sha256_file(s.path)} for i, s in enumerate(stamps)],
            "scene_sources": [{"origin": s.origin, "family": s.family, "kind": s.kind, "licence": s.licence,
                               "sha256": sha256_file(s.path), "canvas_size": list(canvases[i].shape[1::-1])}
                              for i, s in enumerate(sources)],
            "summary": summary,
            # The libraries whose encoders and resamplers fix the output bytes.
            "versions": {"bgbias": bgbias.__version__, "numpy": np.__version__, "pillow": PIL.__version__,
                         "opencv": cv2.__version__},
        }
        write_json_atomic(tmp / "bench.json", description)
    return summary


def split_classes(count: int, seed: int) -> list[str]:
    """The split of each class index: a seeded shuffle cut at the shares of ``SPLIT_SHARES``."""
    if count < len(SPLIT_SHARES):
        raise AssetError(f"the bench needs at least {len(SPLIT_SHARES)} usable stamps (one class per split), "
                         f"found {count}", fix="point at the full stamps root of tuxpaint-stamps-default")
    names = list(SPLIT_SHARES)
    sizes, left = {}, count
    for position, name in enumerate(names[:-1]):
        still_to_fill = len(names) - position - 1
        sizes[name] = min(max(1, round(SPLIT_SHARES[name] * count)), left - still_to_fill)
        left -= sizes[name]
    sizes[names[-1]] = left
    order = np.random.default_rng(np.random.SeedSequence([seed, _SPLIT_STREAM])).permutation(count)
    splits = [""] * count
    start = 0
    for name in SPLIT_SHARES:
        for index in order[start : start + sizes[name]]:
            splits[int(index)] = name
        start += sizes[name]
    return splits


def view_rng(seed: int, class_index: int, view_index: int) -> np.random.Generator:
    """The rng of one view: independent of every other view and of the order views are made in."""
    return np.random.default_rng(np.random.SeedSequence([seed, _VIEW_STREAM, class_index, view_index]))


def home_rng(seed: int, class_index: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, _HOME_STREAM, class_index]))


# --- scene crops --------------------------------------------------------------------------------------------

Box = tuple[int, int, int, int]
"""(left, top, right, bottom) in canvas pixels: a canvas is several view sides large, so whole pixels do."""


def sample_scene_box(rng: np.random.Generator, canvas_size: tuple[int, int]) -> Box:
    """A square crop of a scene canvas (width, height), its side ``SCENE_BOX_SIDE`` of the short side."""
    width, height = canvas_size
    side = max(1, round(rng.uniform(*SCENE_BOX_SIDE) * min(width, height)))
    left, top = int(rng.integers(0, width - side + 1)), int(rng.integers(0, height - side + 1))
    return left, top, left + side, top + side


def jitter_home_box(rng: np.random.Generator, home: Box, canvas_size: tuple[int, int]) -> Box:
    """The home crop moved by up to ``HOME_SHIFT``, zoomed by up to ``HOME_ZOOM``, kept inside the canvas."""
    width, height = canvas_size
    side = home[2] - home[0]
    new_side = max(1, min(round(side * rng.uniform(1 - HOME_ZOOM, 1 + HOME_ZOOM)), width, height))
    cx = (home[0] + home[2]) / 2 + rng.uniform(-HOME_SHIFT, HOME_SHIFT) * side
    cy = (home[1] + home[3]) / 2 + rng.uniform(-HOME_SHIFT, HOME_SHIFT) * side
    left = min(max(round(cx - new_side / 2), 0), width - new_side)
    top = min(max(round(cy - new_side / 2), 0), height - new_side)
    return left, top, left + new_side, top + new_side


def pick_scene(rng: np.random.Generator, families: list[list[int]]) -> int:
    """A scene index: a family uniformly, then one of its members (a picture shipped at three sizes is not
    three times as likely)."""
    members = families[int(rng.integers(len(families)))]
    return members[int(rng.integers(len(members)))]


def scene_canvas(path: str | os.PathLike[str], short_side: int) -> np.ndarray:
    """Decode a scene picture once and resize it to ``short_side`` pixels on its short side."""
    image = load_image(path)
    factor = short_side / min(image.size)
    size = (max(1, round(image.width * factor)), max(1, round(image.height * factor)))
    # reducing_gap: a box-filter reduction first, then Lanczos; far faster on 6000-px photos, visually equal.
    return np.asarray(image.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0))


def crop_scene(scene: Image.Image, box: Box, size: int) -> np.ndarray:
    """The view's background: ``box`` of a scene canvas resized to size × size."""
    return np.asarray(crop_resized(scene, box, (size, size)))


def _scene_canvas_task(task: tuple[Path, int]) -> np.ndarray:
    return scene_canvas(*task)


# --- rendering (runs in worker processes) -------------------------------------------------------------------


@dataclass(frozen=True)
class _ClassJob:
    index: int
    stamp_path: Path
    class_name: str
    split: str


@dataclass(frozen=True)
class _RenderContext:
    out_dir: str
    canvases: list[np.ndarray]
    families: list[list[int]]  # indexes of the canvases of each scene family
    settings: BenchPreset
    view_ranges: ViewPreset
    rho: float
    seed: int


_CONTEXT: _RenderContext | None = None
_SCENES: list[Image.Image] = []


def _init_worker(context: _RenderContext | None) -> None:
    """Keep the shared inputs in the worker (sent once, not with every class)."""
    global _CONTEXT, _SCENES
    _CONTEXT = context
    _SCENES = [] if context is None else [Image.fromarray(c) for c in context.canvases]


def _render_class(job: _ClassJob) -> list[dict[str, Any]]:
    """Render, write and describe every view of one class."""
    context, scenes = _CONTEXT, _SCENES
    assert context is not None
    settings, size = context.settings, context.settings.image_size
    stamp = load_stamp(job.stamp_path)
    home = home_rng(context.seed, job.index)
    home_source = pick_scene(home, context.families)
    home_box = sample_scene_box(home, scenes[home_source].size)
    records = []
    for view in range(settings.views_per_class):
        rng = view_rng(context.seed, job.index, view)
        at_home = bool(rng.random() < context.rho)
        if at_home:
            source, box = home_source, jitter_home_box(rng, home_box, scenes[home_source].size)
        else:
            source = pick_scene(rng, context.families)
            box = sample_scene_box(rng, scenes[source].size)
        background = crop_scene(scenes[source], box, size)
        params = sample_view_params(rng, context.view_ranges)
        rgb, alpha = render_view(stamp, background, params, size)
        stem = f"{job.split}/{job.class_name}/{view:03d}"
        image_rel, mask_rel = f"images/{stem}.jpg", f"ground_truth/{stem}.png"
        out = Path(context.out_dir)
        _save(Image.fromarray(rgb), out / image_rel, format="JPEG", quality=JPEG_QUALITY, subsampling=0)
        _save(Image.fromarray(alpha, mode="L"), out / mask_rel, format="PNG")
        records.append({
            "image": image_rel, "ground_truth_mask": mask_rel, "label": job.index,
            "class_name": job.class_name, "split": job.split, "view": view, "home": at_home,
            "background": {"source": source, "box": list(box), "home_source": home_source,
                           "home_box": list(home_box)},
            "params": asdict(params), "foreground_fraction": round(float(alpha.mean()) / 255, 6),
        })
    return records


def _save(image: Image.Image, path: Path, **options: Any) -> None:
    """Encode in memory, then write; ``build_bench`` swaps the whole bench folder in atomically."""
    data = encoded(image, **options)
    make_dirs(path.parent)
    with reporting_write_errors(path):
        path.write_bytes(data)


def _map(
    function: Callable[[Any], Any], items: list[Any], workers: int, context: _RenderContext | None = None
) -> list[Any]:
    """``function`` over ``items``, in order, in this process or in ``workers`` spawned processes."""
    if workers <= 1 or len(items) <= 1:
        _init_worker(context)
        try:
            return [function(item) for item in items]
        finally:
            _init_worker(None)

    spawn = multiprocessing.get_context("spawn")  # no fork: the caller may hold threads (torch, tqdm)
    chunk = max(1, len(items) // (4 * workers))
    with ProcessPoolExecutor(workers, spawn, initializer=_init_worker, initargs=(context,)) as pool:
        return list(pool.map(function, items, chunksize=chunk))


# --- the index, the view log and the description ------------------------------------------------------------


def _write_index(path: Path, records: list[dict[str, Any]]) -> None:
    with reporting_write_errors(path), open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(INDEX_HEADER)
        for r in records:
            writer.writerow([r["image"], r["label"], r["class_name"], r["split"], r["ground_truth_mask"]])


def _write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """Every view's sampled parameters, one JSON object a line: enough to redraw or audit any view."""
    with reporting_write_errors(path), open(path, "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, sort_keys=True) + "\n")


def _summary(records: list[dict[str, Any]], jobs: list[_ClassJob], rho: float) -> dict[str, Any]:
    def per_split(values: Iterable[str]) -> dict[str, int]:
        values = list(values)
        return {name: values.count(name) for name in SPLIT_SHARES}

    fractions = [r["foreground_fraction"] for r in records]
    return {
        "classes": per_split(job.split for job in jobs),
        "images": per_split(r["split"] for r in records),
        "mean_foreground_fraction": round(float(np.mean(fractions)), 4),
        "home_view_fraction": round(sum(r["home"] for r in records) / len(records), 4),
        "rho": rho,
    }


def _settings(preset: str, rho: float) -> BenchPreset:
    if preset not in BENCH_PRESETS:
        raise OptionError(f"unknown bench preset {preset!r}", fix=f"use one of: {', '.join(BENCH_PRESETS)}")
    if not 0.0 <= rho <= 1.0:
        raise OptionError(f"rho must lie in [0, 1], got {rho}", fix="pass a probability such as 0.9")
    return BENCH_PRESETS[preset]

