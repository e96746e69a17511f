"""Evaluation throughput: embedding a split through its data loader vs a bare forward pass, in one run.

    python benchmarks/eval_speed.py [--device cpu|cuda] [--batch 64] [--workers 2] [-n 3] [--root DATA/bench]

The bench method (MobileNetV2 → 128-d, random weights: speed does not depend on their values) embeds the
bench's clean test split. The bare forward pass gets the same images already decoded, cropped and stacked in
memory, and only moves each batch to the device, scales it and runs ``method.embed``. The evaluation path is
``embed_images`` over ``EvalImages``: the DataLoader's workers decode and crop while the model runs. The two
alternate, ``-n`` times each; the table shows median images/s and the ratio (goal: evaluation ≥ 0.9× bare).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_split import bare_forward, bench_split, print_rates, throughput_arguments
from bgbias.engine.embedding import embed_images


def main() -> None:
    args = throughput_arguments(__doc__.splitlines()[0])
    split = bench_split(args)

    def loaded() -> float:
        started = time.perf_counter()
        embed_images(split.method, split.images, split.device, batch_size=args.batch, workers=args.workers)
        return len(split.images) / (time.perf_counter() - started)

    bare_forward(split, args.batch, split.method.embed)  # warm-up: first-call allocations, kernel selection
    bare_name, loaded_name = "bare forward (images in memory)", "evaluation (loader + forward)"
    rates: dict[str, list[float]] = {bare_name: [], loaded_name: []}
    for _ in range(args.n):
        rates[bare_name].append(bare_forward(split, args.batch, split.method.embed))
        rates[loaded_name].append(loaded())
    print_rates(args, split, rates)


if __name__ == "__main__":
    main()
