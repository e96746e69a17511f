"""What BGAugment adds to a training step, and whether the data path keeps the model busy: one run.

    python benchmarks/train_speed.py [--device cpu|cuda] [--size 128] [--batch 32] [-n 20]
                                     [--root DATA/bench] [--masks masks/bench] [--backgrounds backgrounds]

1. Step overhead: the bench method (MobileNetV2 → 128-d, multi-similarity loss, Adam) trains on batches of
   uint8 images and masks that are already on the device. A plain step is ``images / 255`` → forward →
   backward → optimizer step; a BGAugment step puts ``BGAugment`` (background crops rendered from the bank on
   the device, composite) in front. The two alternate, ``-n`` timed steps each after warm-up, and the table
   shows medians and the overhead of BGAugment relative to the plain step (goal: ≤ 5 %).
2. Data path vs model: the training loader (sampler, workers decoding and applying the paired transform,
   with masks) is timed alone over ``-n`` batches, and its images/s is compared with the training step's
   images/s (goal: loader ≥ step on CPU). The loader runs alone here; in training it shares the cores with
   the model, which the epochs' ``train_images_per_second`` in ``metrics.jsonl`` shows.

Random-initialised weights (speed does not depend on their values). Uses the bench and its masks as made by
``bgbias study`` / ``bgbias masks --dataset bench``.
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

from benchmarks.timing import synchronize
from bgbias.bgaugment.background_bank import train_bank
from bgbias.bgaugment.bgaugment import BGAugment
from bgbias.bgaugment.generators import keyed_generator
from bgbias.bgaugment.mask_check import saliency_masks
from bgbias.data.registry import open_dataset
from bgbias.data.splits import split_items
from bgbias.engine.config import resolve_config
from bgbias.engine.device import resolve_device
from bgbias.engine.training_build import build_method, build_optimizer, make_train_loader
from bgbias.engine.training_data import train_images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--size", type=int, default=128, help="crop side of the training images")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("-n", type=int, default=20, help="timed steps / batches per method")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--root", type=Path, default=Path("data/bench"))
    parser.add_argument("--masks", type=Path, default=Path("masks/bench"))
    parser.add_argument("--backgrounds", type=Path, default=Path("backgrounds"))
    args = parser.parse_args()

    import torch

    device = resolve_device(args.device)
    config = resolve_config(
        "multi_similarity", "bench", options={"root": str(args.root)},
        overrides=["model.pretrained=false", f"data.batch_size={args.batch}", f"data.crop={args.size}",
                   f"data.workers={args.workers}"],
    )
    dataset = open_dataset("bench", args.root)
    items = split_items(dataset, "train")
    masks = saliency_masks(items, args.masks, "bench")
    loader, _ = make_train_loader(config, train_images(config, dataset, items, masks), device)

    torch.manual_seed(0)
    method = build_method(config, items, input_size=args.size).to(device).train()
    optimizer = build_optimizer(config, method)
    bgaugment = BGAugment(train_bank(args.backgrounds, device), 1.0)

    first = [batch for batch, _ in zip(loader, range(4), strict=False)]
    batches = [{key: value.to(device) for key, value in batch.items()} for batch in first]
    plain, augmented = time_steps(method, optimizer, bgaugment, batches, args.n, device)
    loader_seconds = time_loader(loader, 3 * args.n)

    step_rate = args.batch / statistics.median(plain)
    loader_rate = args.batch / statistics.mean(loader_seconds)
    print(f"command: python {shlex.join(sys.argv)}")
    print(f"machine: {platform.machine()}, {torch.get_num_threads()} torch threads, device {device}, "
          f"torch {torch.__version__}, batch {args.batch} at {args.size} px, n = {args.n}\n")
    print("| measure | ms/batch | images/s |")
    print("|---|---:|---:|")
    for name, seconds in (("plain step (anchor), median", statistics.median(plain)),
                          ("BGAugment step, median", statistics.median(augmented)),
                          (f"loader alone, {args.workers} workers, mean", statistics.mean(loader_seconds))):
        print(f"| {name} | {1000 * seconds:.1f} | {args.batch / seconds:.1f} |")
    overhead = statistics.median(augmented) / statistics.median(plain) - 1
    print(f"\nBGAugment overhead per step: {100 * overhead:+.1f} % (goal ≤ 5 %)")
    print(f"loader / step throughput: {loader_rate / step_rate:.2f}× (goal ≥ 1)")


def time_steps(method, optimizer, bgaugment, batches, n, device):
    """Alternate plain and BGAugment steps; return their wall times (seconds), warm-up excluded."""
    from bgbias.methods.base import Batch

    def step(batch, augment: bool, index: int) -> float:
        synchronize(device)
        start = time.perf_counter()
        if augment:
            images = bgaugment(batch["image"], batch["mask"], keyed_generator([index]))  # as the engine
        else:
            images = batch["image"].float().div_(255)
        loss = method.loss(Batch(images, batch["label"], batch["index"]))["loss"]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        synchronize(device)
        return time.perf_counter() - start

    plain, augmented = [], []
    for index in range(n + 2):
        batch = batches[index % len(batches)]
        first, second = (False, True) if index % 2 else (True, False)
        times = {first: step(batch, first, index), second: step(batch, second, index)}
        if index >= 2:
            plain.append(times[False])
            augmented.append(times[True])
    return plain, augmented


def time_loader(loader, n):
    """Seconds per batch of the loader alone, after its workers have started (its prefetch buffer makes single
    batches arrive at once, so only the mean over many batches is its rate)."""
    times = []
    iterator = iter(loader)
    next(iterator)
    for _ in range(n):
        start = time.perf_counter()
        try:
            next(iterator)
        except StopIteration:
            iterator = iter(loader)
            next(iterator)
        times.append(time.perf_counter() - start)
    return times


if __name__ == "__main__":
    main()
