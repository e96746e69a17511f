"""What the evaluation-throughput benchmarks share: their options, the bench's clean test split decoded once
into memory (what a bare forward pass is fed), the untrained bench model, a bare forward pass over the
decoded images, and the table of images/s against that pass."""

from __future__ import annotations

import argparse
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bgbias.data.eval_images import EvalImages
from bgbias.data.registry import open_dataset
from bgbias.data.splits import split_items
from bgbias.data.transforms import eval_geometry
from bgbias.engine.config import resolve_config
from bgbias.engine.device import resolve_device
from bgbias.engine.training_build import build_method


def throughput_arguments(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("-n", type=int, default=3, help="timed passes of each")
    parser.add_argument("--root", type=Path, default=Path("data/bench"))
    return parser.parse_args()


@dataclass
class BenchSplit:
    """The bench's clean test split as the evaluation loads it (``images``) and already decoded, cropped and
    stacked as uint8 (``decoded``), with the bench method (MobileNetV2 → 128-d, random weights: speed does
    not depend on their values) in eval mode on ``device``."""

    device: Any
    items: list
    images: EvalImages
    decoded: Any
    method: Any


def bench_split(args: argparse.Namespace) -> BenchSplit:
    import torch

    device = resolve_device(args.device)
    dataset = open_dataset("bench", args.root)
    items = split_items(dataset, "test")
    config = resolve_config("multi_similarity", "bench", overrides=["model.pretrained=false"])
    method = build_method(config, split_items(dataset, "train"), input_size=128).to(device).eval()
    images = EvalImages(items, eval_geometry("bench"))
    decoded = torch.stack([images[i]["image"] for i in range(len(images))])
    return BenchSplit(device, items, images, decoded, method)


def bare_forward(split: BenchSplit, batch_size: int, forward: Callable[[Any], Any]) -> float:
    """Images/s of ``forward`` over the decoded images, each batch only moved to the device and scaled."""
    import torch

    started = time.perf_counter()
    with torch.inference_mode():
        for start in range(0, len(split.decoded), batch_size):
            batch = split.decoded[start : start + batch_size].to(split.device, non_blocking=True)
            forward(batch.float().div_(255)).cpu()
    return len(split.decoded) / (time.perf_counter() - started)


def print_rates(args: argparse.Namespace, split: BenchSplit, rates: dict[str, list[float]]) -> None:
    """The table: each path's median images/s, its runs, and its ratio to the first path's median."""
    import torch

    anchor = statistics.median(next(iter(rates.values())))
    print(f"# {shlex.join(sys.argv)}")
    print(f"# {platform.platform()}, {platform.processor() or platform.machine()}, "
          f"torch {torch.__version__}, device {split.device}, {torch.get_num_threads()} threads, "
          f"{len(split.items)} images at {eval_geometry('bench').crop} px, batch {args.batch}, "
          f"{args.workers} workers")
    print("| path | median images/s | runs | vs bare forward |")
    print("|---|---|---|---|")
    for name, values in rates.items():
        runs, median = ", ".join(f"{v:.0f}" for v in values), statistics.median(values)
        print(f"| {name} | {median:.0f} | {runs} | {median / anchor:.2f}x |")
