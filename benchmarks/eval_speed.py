"""Evaluation throughput: embedding a split through its data loader vs a bare forward pass, in one run.

    python benchmarks/eval_speed.py [--device cpu|cuda] [--batch 64] [--workers 2] [-n 3] [--root DATA/bench]

The bench method (MobileNetV2 → 128-d, random weights: speed does not depend on their values) embeds the
bench's clean test split. The bare forward pass gets the same images already decoded, cropped and stacked in
memory, and only moves each batch to the device, scales it and runs ``method.embed``. The evaluation path is
``embed_images`` over ``EvalImages``: the DataLoader's workers decode and crop while the model runs. The two
alternate, ``-n`` times each; the table shows median images/s and the ratio (goal: evaluation ≥ 0.9× bare).
"""

from __future__ import annotations

import argparse
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bgbias.data.eval_images import EvalImages
from bgbias.data.registry import open_dataset
from bgbias.data.splits import split_items
from bgbias.data.transforms import eval_geometry
from bgbias.engine.config import resolve_config
from bgbias.engine.device import resolve_device
from bgbias.engine.embedding import embed_images
from bgbias.engine.training import build_method


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("-n", type=int, default=3, help="timed passes of each")
    parser.add_argument("--root", type=Path, default=Path("data/bench"))
    args = parser.parse_args()

    import torch

    device = resolve_device(args.device)
    dataset = open_dataset("bench", args.root)
    items = split_items(dataset, "test")
    config = resolve_config("multi_similarity", "bench", overrides=["model.pretrained=false"])
    method = build_method(config, split_items(dataset, "train"), input_size=128).to(device).eval()
    images = EvalImages(items, eval_geometry("bench"))
    decoded = torch.stack([images[i]["image"] for i in range(len(images))])

    def bare() -> float:
        started = time.perf_counter()
        with torch.inference_mode():
            for start in range(0, len(decoded), args.batch):
                batch = decoded[start : start + args.batch].to(device, non_blocking=True).float().div_(255)
                method.embed(batch).cpu()
        return len(decoded) / (time.perf_counter() - started)

    def loaded() -> float:
        started = time.perf_counter()
        embed_images(method, images, device, batch_size=args.batch, workers=args.workers)
        return len(images) / (time.perf_counter() - started)

    bare()  # warm-up: first-call allocations and kernel selection
    bare_name, loaded_name = "bare forward (images in memory)", "evaluation (loader + forward)"
    rates: dict[str, list[float]] = {bare_name: [], loaded_name: []}
    for _ in range(args.n):
        rates[bare_name].append(bare())
        rates[loaded_name].append(loaded())
    anchor = statistics.median(rates[bare_name])
    print(f"# {shlex.join(sys.argv)}")
    print(f"# {platform.platform()}, {platform.processor() or platform.machine()}, "
          f"torch {torch.__version__}, device {device}, {torch.get_num_threads()} threads, "
          f"{len(items)} images at {eval_geometry('bench').crop} px, batch {args.batch}, "
          f"{args.workers} workers")
    print("| path | median images/s | runs | vs bare forward |")
    print("|---|---|---|---|")
    for name, values in rates.items():
        runs, median = ", ".join(f"{v:.0f}" for v in values), statistics.median(values)
        print(f"| {name} | {median:.0f} | {runs} | {median / anchor:.2f}x |")


if __name__ == "__main__":
    main()
