"""Exact MAP@R at scale: bgbias's scoring against faiss's bare exact search for the same k (the floor) and
pytorch-metric-learning's AccuracyCalculator, side by side in one run, each in a process of its own so that
its peak memory is its own.

    python benchmarks/scoring_scale.py --images 250000 --dim 128 --classes 10000
    python benchmarks/scoring_scale.py --images 250000 --dim 128 --classes 10000 --big-class 20000

The embeddings are random (seed 0), ``--classes`` classes of equal size, or with ``--big-class N`` one class
of N images (R = N − 1) and the rest spread over the other classes. k is the largest class size minus one,
as scoring needs. Prints, per contender, the wall time, the peak resident memory (``ru_maxrss`` of its
process) and, for the two scorers, MAP@R; a contender that fails (out of memory, say) prints why.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time


def data(images: int, dim: int, classes: int, big_class: int, seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    if big_class:
        labels = np.concatenate([np.zeros(big_class, dtype=np.int64),
                                 1 + np.arange(images - big_class) % (classes - 1)])
    else:
        labels = np.arange(images) % classes
    embeddings = rng.normal(size=(images, dim)).astype(np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    return embeddings, labels


def contender(name: str, options: argparse.Namespace) -> dict:
    """Run one contender in this process; its figures."""
    import numpy as np

    embeddings, labels = data(options.images, options.dim, options.classes, options.big_class)
    k = int(np.bincount(labels).max()) - 1
    started = time.perf_counter()
    result: dict = {"k": k}
    if name == "bgbias":
        from bgbias.retrieval.metrics import score_embeddings

        scores = score_embeddings(embeddings, labels, max_memory=options.max_memory)
        result["map_at_r"] = scores.map_at_r
    elif name == "faiss":
        import faiss

        index = faiss.IndexFlatL2(embeddings.shape[1])
        index.add(embeddings)
        index.search(embeddings, k + 1)
    else:
        import torch
        from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

        calculator = AccuracyCalculator(include=("mean_average_precision_at_r",), k="max_bin_count")
        tensor, targets = torch.from_numpy(embeddings), torch.from_numpy(labels)
        scores = calculator.get_accuracy(tensor, targets, tensor, targets, ref_includes_query=True)
        result["map_at_r"] = float(scores["mean_average_precision_at_r"])
    result["seconds"] = time.perf_counter() - started
    result["peak_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=250_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--classes", type=int, default=10_000)
    parser.add_argument("--big-class", type=int, default=0)
    parser.add_argument("--max-memory", type=int, default=1 << 30)
    parser.add_argument("--contenders", default="faiss,bgbias,pml")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.one:
        print(json.dumps(contender(options.one, options)))
        return
    print(f"command: python benchmarks/scoring_scale.py {' '.join(sys.argv[1:])}")
    print(f"machine: {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    for name in options.contenders.split(","):
        done = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--one", name], capture_output=True,
                              text=True, check=False)
        if done.returncode == 0:
            figures = json.loads(done.stdout.splitlines()[-1])
            score = f", MAP@R {figures['map_at_r']:.6f}" if "map_at_r" in figures else ""
            print(f"{name}: k {figures['k']}, {figures['seconds']:.1f} s, peak {figures['peak_gib']:.2f} GiB"
                  f"{score}")
        else:
            last = (done.stderr.strip().splitlines() or ["?"])[-1]
            print(f"{name}: failed (exit {done.returncode}): {last}")


if __name__ == "__main__":
    main()
