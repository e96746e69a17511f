"""The leakage meter's cost against a bare embedding pass of the same split with the same encoder, in one run.

    python benchmarks/leakage_speed.py [--device cpu|cuda] [--batch 64] [--workers 2] [-n 3]
        [--root data/bench] [--masks masks/bench-ground-truth] [--fill inpainted]

The meter's default encoder (the ImageNet MobileNetV2 of the offline assets) on the bench's test split, exact
masks. The anchor is one bare embedding pass: ``embed_images`` over ``EvalImages`` (decode, evaluation
transform, forward). The meter is ``measure_leakage`` (two views, each decoded with its mask, filled and
embedded; two searches, two probes, the bootstrap), nothing written. The meter's two passes are also timed
where it runs them, so its overhead beside them is measured under the same load. The two contenders
alternate (A/B, B/A, ...) in this one process; the table shows each one's median wall and CPU seconds (this
process and its loader workers), the load average while it ran, and the meter's ratio to one bare pass and
to two (goal: ≤ 1.3 × two passes), from the medians and pass by pass (each meter run against the mean of the
two bare passes around it), which is robust to a machine whose load drifts.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bgbias.leakage_meter.meter as meter
from bgbias.api import as_embedding_model
from bgbias.data.eval_images import EvalImages
from bgbias.data.registry import open_dataset
from bgbias.data.splits import split_items
from bgbias.engine.embedding import embed_images
from bgbias.measurement.request import measured_geometry


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its reaped children (the loader's workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measured(function: Callable[[], object]) -> tuple[float, float, float]:
    """(wall s, CPU s, 1-minute load average at the end) of ``function()``."""
    wall, cpu = time.perf_counter(), cpu_seconds()
    function()
    return time.perf_counter() - wall, cpu_seconds() - cpu, os.getloadavg()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("-n", type=int, default=3, help="timed passes of each")
    parser.add_argument("--root", type=Path, default=Path("data/bench"))
    parser.add_argument("--masks", type=Path, default=Path("masks/bench-ground-truth"))
    parser.add_argument("--fill", default=meter.DEFAULT_FILL)
    args = parser.parse_args()

    import torch

    encoder = as_embedding_model(meter.DEFAULT_ENCODER, device=args.device)
    dataset = open_dataset("bench", args.root)
    items = split_items(dataset, "test")
    geometry = measured_geometry(encoder, dataset.name)
    clean = EvalImages(items, geometry)

    def bare() -> None:
        embed_images(encoder, clean, encoder.device, batch_size=args.batch, workers=args.workers,
                     amp=encoder.amp)

    inside: list[dict[str, float]] = []

    def timed_embed(*positional, **options):
        started = time.perf_counter()
        made = embed_images(*positional, **options)
        inside[-1][options["desc"]] = time.perf_counter() - started
        return made

    meter.embed_images = timed_embed  # the meter's own passes, timed where they run

    def leakage() -> None:
        inside.append({})
        meter.measure_leakage(dataset, encoder, split="test", masks_dir=args.masks, fill=args.fill,
                              batch_size=args.batch, workers=args.workers)

    bare()  # warm-up: first-call allocations, kernel selection, OpenCV's import
    leakage()
    inside.clear()
    bare_name, meter_name = "bare embedding pass (EvalImages)", f"measure_leakage (fill {args.fill})"
    runs: dict[str, list[tuple[float, float, float]]] = {bare_name: [], meter_name: []}
    sequence: list[str] = []
    for index in range(args.n):
        for name in [bare_name, meter_name] if index % 2 == 0 else [meter_name, bare_name]:
            runs[name].append(measured(bare if name == bare_name else leakage))
            sequence.append(name)
    runs[bare_name].append(measured(bare))  # so that every meter run has a bare pass on either side
    sequence.append(bare_name)

    order = " / ".join("A" if name == bare_name else "B" for name in sequence)
    anchor = statistics.median(wall for wall, _, _ in runs[bare_name])
    anchor_cpu = statistics.median(cpu for _, cpu, _ in runs[bare_name])
    print(f"# {shlex.join(sys.argv)}")
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.platform()}, "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"device {encoder.device}, {torch.get_num_threads()} threads, {len(items)} images at "
          f"{geometry.crop} px, batch {args.batch}, {args.workers} workers; order {order} (A bare, B meter)")
    print("| path | median wall s | runs: wall s (CPU s) | median CPU s | load avg (1 min) | "
          "wall vs 1 bare | wall vs 2 bare | CPU vs 2 bare |")
    print("|---|---:|---|---:|---|---:|---:|---:|")
    for name, values in runs.items():
        walls, cpus, loads = zip(*values, strict=True)
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        runs_text = ", ".join(f"{w:.1f} ({c:.1f})" for w, c in zip(walls, cpus, strict=True))
        print(f"| {name} | {wall:.1f} | {runs_text} | {cpu:.1f} | "
              f"{', '.join(f'{v:.1f}' for v in loads)} | {wall / anchor:.2f}x | {wall / (2 * anchor):.2f}x | "
              f"{cpu / (2 * anchor_cpu):.2f}x |")
    passes = [sum(views.values()) for views in inside]
    for view in inside[0]:
        walls = [views[view] for views in inside]
        print(f"| its {view} pass, timed inside it | {statistics.median(walls):.1f} | "
              f"{', '.join(f'{v:.1f}' for v in walls)} | | | {statistics.median(walls) / anchor:.2f}x | | |")
    overhead = [total - both for (total, _, _), both in zip(runs[meter_name], passes, strict=True)]
    print(f"| its two view passes, timed inside it | {statistics.median(passes):.1f} | "
          f"{', '.join(f'{v:.1f}' for v in passes)} | | | {statistics.median(passes) / anchor:.2f}x | "
          f"{statistics.median(passes) / (2 * anchor):.2f}x | |")
    print(f"| its overhead beside them (searches, probes, bootstrap) | {statistics.median(overhead):.1f} | "
          f"{', '.join(f'{v:.1f}' for v in overhead)} | | | | | |")
    paired = _paired_ratios(sequence, runs, bare_name, meter_name)
    middle, listed = statistics.median(paired), ", ".join(f"{v:.2f}" for v in paired)
    print(f"\npass by pass, meter / mean of the bare passes around it: {listed} (median {middle:.2f}x one "
          f"bare pass, {middle / 2:.2f}x two)")


def _paired_ratios(sequence: list[str], runs: dict[str, list[tuple[float, float, float]]], bare_name: str,
                   meter_name: str) -> list[float]:
    """Each meter run's wall time over the mean of the nearest bare pass before it and after it."""
    taken = {bare_name: iter(runs[bare_name]), meter_name: iter(runs[meter_name])}
    walls = [(name, next(taken[name])[0]) for name in sequence]
    ratios = []
    for position, (name, wall) in enumerate(walls):
        if name == meter_name:
            before = [w for n, w in walls[:position] if n == bare_name][-1:]
            after = [w for n, w in walls[position + 1:] if n == bare_name][:1]
            ratios.append(wall / statistics.mean(before + after))
    return ratios


if __name__ == "__main__":
    main()
