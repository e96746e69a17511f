"""The background-reliance profile's cost against the embedding passes of its sets, in one run.

    python benchmarks/profile_speed.py [--device cpu|cuda] [--batch 64] [--workers 2] [-n 2]
        [--root data/bench] [--masks masks/bench] [--backgrounds backgrounds] [--repeats 5] [--worst-k 10]

The bench method (MobileNetV2 → 128-d, random weights: speed does not depend on their values) and the bench's
test split. The anchor embeds every set the profile scores, each once through ``embed_images`` (clean, the
``max(repeats, worst_k)`` random-background repeats, the three fixed variants and ``repeats`` sets of each
mixed variant), and sums the times. The profile is ``evaluate(..., MeasureRequest(profile=True))`` into an
empty cache: the same passes plus manifests loaded and checked, searches, scores, report files and plots.
The intervals of its report (every call of ``bgbias.measurement.intervals``' bootstrap, issue 50: headline,
classes, profile rows, the paste control's decomposition) are timed inside the profile run as well, against
its wall time (goal ≤ 5 %). Manifests are made before timing (they are shared by every model); the first
call's cost of making them is printed apart. The two alternate, ``-n`` times each; the table shows medians and
the ratio (goal ≤ 1.10).
On a machine shared with other jobs the passes' speed drifts between the two; the last rows therefore also
time the passes *inside* each profile run (``embed_images`` as the evaluation calls it), so the profile's own
overhead, and its ratio to its own passes, are measured under the same load.
"""

from __future__ import annotations

import argparse
import platform
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bgbias.engine.split_states as split_states
import bgbias.measurement.intervals as intervals
from bgbias.corrupted.corrupted_images import CorruptedImages
from bgbias.data.eval_images import EvalImages
from bgbias.data.registry import open_dataset
from bgbias.data.splits import split_items
from bgbias.data.transforms import eval_geometry
from bgbias.engine.config import resolve_config
from bgbias.engine.device import resolve_device
from bgbias.engine.embedding import embed_images
from bgbias.engine.method_model import MethodModel
from bgbias.engine.training_build import build_method
from bgbias.measurement.request import MeasureRequest
from bgbias.measurement.sets import corrupted_manifests, variant_sets
from bgbias.report.evaluate import evaluate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("-n", type=int, default=2, help="timed rounds of each")
    parser.add_argument("--root", type=Path, default=Path("data/bench"))
    parser.add_argument("--masks", type=Path, default=Path("masks/bench"))
    parser.add_argument("--backgrounds", type=Path, default=Path("backgrounds"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--worst-k", type=int, default=10)
    args = parser.parse_args()

    import torch

    device = resolve_device(args.device)
    dataset = open_dataset("bench", args.root)
    items = split_items(dataset, "test")
    geometry = eval_geometry("bench")
    config = resolve_config("multi_similarity", "bench", overrides=["model.pretrained=false"])
    method = build_method(config, split_items(dataset, "train"), input_size=128).to(device).eval()
    scratch = Path(tempfile.mkdtemp(prefix="profile-speed-"))
    manifests = scratch / "manifests"
    request = MeasureRequest(dataset="bench", root=args.root, masks=args.masks, backgrounds=args.backgrounds,
                             manifests=manifests, profile=True, repeats=args.repeats, worst_k=args.worst_k,
                             batch_size=args.batch, workers=args.workers, progress=False)

    started = time.perf_counter()
    random_bg = corrupted_manifests(dataset, "test", max(args.repeats, args.worst_k), 0, args.backgrounds,
                                    manifests, "fixed", 0, geometry)
    variants = variant_sets(dataset, items, manifests, "test", args.repeats, 0, "fixed", 0, geometry,
                            args.masks)
    making = time.perf_counter() - started
    sets = [EvalImages(items, geometry), *(CorruptedImages(items, m, args.masks, "bench") for m in random_bg),
            *variants]

    def passes() -> float:
        total = 0.0
        for images in sets:
            started = time.perf_counter()
            embed_images(method, images, device, batch_size=args.batch, workers=args.workers)
            total += time.perf_counter() - started
        return total

    inside: list[float] = []

    def timed_embed(*positional, **options):
        started = time.perf_counter()
        made = embed_images(*positional, **options)
        inside[-1] += time.perf_counter() - started
        return made

    split_states.embed_images = timed_embed  # the evaluation's own passes, timed where they run
    resampling: list[float] = []
    bootstrap = intervals._bootstrap

    def timed_bootstrap(*positional, **options):
        started = time.perf_counter()
        made = bootstrap(*positional, **options)
        resampling[-1] += time.perf_counter() - started
        return made

    intervals._bootstrap = timed_bootstrap  # every interval of the report is drawn through it

    def profile(round_index: int) -> float:
        model = MethodModel(method, device, home=scratch / f"home-{round_index}")
        inside.append(0.0)
        resampling.append(0.0)
        started = time.perf_counter()
        result = evaluate(model, request, log=lambda _: None)
        elapsed = time.perf_counter() - started
        assert result.embedded == len(sets), (result.embedded, len(sets))
        return elapsed

    embed_images(method, EvalImages(items[:64], geometry), device, batch_size=args.batch)  # warm-up
    anchor_name, profile_name = "sum of the sets' embedding passes", "evaluate --profile (empty cache)"
    times: dict[str, list[float]] = {anchor_name: [], profile_name: []}
    for round_index in range(args.n):
        order = [anchor_name, profile_name] if round_index % 2 == 0 else [profile_name, anchor_name]
        for name in order:
            times[name].append(passes() if name == anchor_name else profile(round_index))
    anchor = statistics.median(times[anchor_name])
    print(f"# {shlex.join(sys.argv)}")
    print(f"# {platform.platform()}, {platform.processor() or platform.machine()}, "
          f"torch {torch.__version__}, device {device}, {torch.get_num_threads()} threads, "
          f"{len(items)} images at {geometry.crop} px, batch {args.batch}, {args.workers} workers, "
          f"{len(sets)} sets; making the manifests first: {making:.1f} s")
    print("| path | median s | runs | vs the passes |")
    print("|---|---|---|---|")
    for name, values in times.items():
        runs, median = ", ".join(f"{v:.1f}" for v in values), statistics.median(values)
        print(f"| {name} | {median:.1f} | {runs} | {median / anchor:.3f}x |")
    overhead = [total - passes for total, passes in zip(times[profile_name], inside, strict=True)]
    ratios = [total / passes for total, passes in zip(times[profile_name], inside, strict=True)]
    print(f"| its own passes, timed inside it | {statistics.median(inside):.1f} | "
          f"{', '.join(f'{v:.1f}' for v in inside)} | |")
    shares = [spent / total for spent, total in zip(resampling, times[profile_name], strict=True)]
    print(f"| its intervals (bootstrap), timed inside it | {statistics.median(resampling):.2f} | "
          f"{', '.join(f'{v:.2f}' for v in resampling)} | {100 * statistics.median(shares):.2f} % of it |")
    print(f"| the profile's overhead beside its passes | {statistics.median(overhead):.1f} | "
          f"{', '.join(f'{v:.1f}' for v in overhead)} | {statistics.median(ratios):.3f}x its own passes |")


if __name__ == "__main__":
    main()
