"""Retrieval metrics on SOP-sized embeddings: ours against pytorch-metric-learning's AccuracyCalculator.

    python benchmarks/metrics_speed.py [--items 60502] [--classes 11316] [--dim 128] [-n 3]

Random L2-normalised embeddings with class structure (SOP's test split: 60,502 images in 11,316 classes of
2–12 images). Both sides rank the whole split against itself with the query removed and compute MAP@R,
R-precision and P@1 (PML: ``k="max_bin_count"``, CPU). Runs alternate, ``-n`` each; the table shows medians
and the ratio of our time to PML's (goal ≤ 0.5×), after checking that the values agree to 1e-9.
"""

from __future__ import annotations

import argparse
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bgbias.engine.metrics import score_embeddings


def sop_like(items: int, classes: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``items`` embeddings in ``classes`` classes of 2 or more, each a noisy copy of its class centre."""
    rng = np.random.default_rng(seed)
    sizes = np.full(classes, 2)
    extra = rng.multinomial(items - 2 * classes, np.full(classes, 1 / classes))
    sizes += extra
    labels = np.repeat(np.arange(classes), sizes)
    centres = rng.standard_normal((classes, dim)).astype(np.float32)
    vectors = centres[labels] + 1.5 * rng.standard_normal((items, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    order = rng.permutation(items)
    return vectors[order], labels[order]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=60502)
    parser.add_argument("--classes", type=int, default=11316)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("-n", type=int, default=3, help="timed runs of each")
    args = parser.parse_args()

    import torch
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

    embeddings, labels = sop_like(args.items, args.classes, args.dim)
    calculator = AccuracyCalculator(
        include=("mean_average_precision_at_r", "r_precision", "precision_at_1"), k="max_bin_count",
        device=torch.device("cpu"),
    )
    names = {"map_at_r": "mean_average_precision_at_r", "r_precision": "r_precision",
             "precision_at_1": "precision_at_1"}
    times: dict[str, list[float]] = {"bgbias (faiss)": [], "pytorch-metric-learning": []}
    for _ in range(args.n):
        started = time.perf_counter()
        ours = score_embeddings(embeddings, labels)
        times["bgbias (faiss)"].append(time.perf_counter() - started)
        started = time.perf_counter()
        theirs = calculator.get_accuracy(torch.from_numpy(embeddings), torch.from_numpy(labels))
        times["pytorch-metric-learning"].append(time.perf_counter() - started)
        for key, name in names.items():
            if abs(getattr(ours, key) - theirs[name]) > 1e-9:
                raise SystemExit(f"values differ: {key} {getattr(ours, key)} vs {theirs[name]}")
    anchor = statistics.median(times["pytorch-metric-learning"])
    print(f"# {shlex.join(sys.argv)}")
    print(f"# {platform.platform()}, {platform.processor() or platform.machine()}, torch {torch.__version__}")
    print(f"# {args.items} x {args.dim} embeddings, {args.classes} classes; values equal to 1e-9: "
          f"MAP@R {ours.map_at_r:.6f}, R-precision {ours.r_precision:.6f}, P@1 {ours.precision_at_1:.6f}")
    print("| implementation | median s | runs (s) | time vs PML |")
    print("|---|---|---|---|")
    for name, values in times.items():
        runs, median = ", ".join(f"{v:.2f}" for v in values), statistics.median(values)
        print(f"| {name} | {median:.2f} | {runs} | {median / anchor:.2f}x |")


if __name__ == "__main__":
    main()
