"""Exact MAP@R at scale: bgbias's scoring against a bare exact search for the same per-query k (the floor)
and pytorch-metric-learning's AccuracyCalculator, side by side in one run, each in a process of its own so
that its peak memory and CPU time are its own.

    python benchmarks/scoring_scale.py --images 250000 --dim 128 --classes 10000
    python benchmarks/scoring_scale.py --images 250000 --dim 128 --classes 10000 --big-class 20000
    python benchmarks/scoring_scale.py --device cuda --images 250000 --dim 128 --classes 10000

The embeddings are random (seed 0), ``--classes`` classes of equal size, or with ``--big-class N`` one class
of N images (R = N − 1) and the rest spread over the other classes. Each query needs its own R neighbours
(at least 8, the neighbours bgbias keeps, capped by the largest R): bgbias searches blocks of queries for
what they need, and so does the floor, in chunks within ``--max-memory``, so the floor stays the same work
minus the scoring.

Without ``--device``: bgbias with faiss (``IndexFlatL2`` on the CPU) against bare faiss and PML (its faiss
search). PML runs under an address-space cap (``--pml-cap``), so that it fails with MemoryError instead of
waking the kernel's out-of-memory killer on a shared machine. With ``--device cuda`` (or ``cpu``, to check
the same path small): bgbias's torch backend on that device against a bare chunked torch matmul + topk there,
and PML with its batched torch k-NN there (``CustomKNN``; no address-space cap: CUDA reserves far more
address space than it uses).

Prints, per contender, the wall time and CPU time (user + system of its process while it ran), their ratios
to the floor's, the peak resident memory (``ru_maxrss``; on CUDA also the peak GPU memory torch allocated)
and, for the two scorers, MAP@R; a contender that fails (out of memory, say) prints why.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

KEPT = 8
"""Neighbours bgbias keeps per query (bgbias.retrieval.metrics.KEPT_NEIGHBOURS): the least it searches for."""


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


def needs(labels) -> Any:
    """Neighbours each query needs besides itself: its R, at least the kept ones, at most the largest R."""
    import numpy as np

    sizes = np.bincount(labels)
    r = sizes[labels] - 1
    return np.maximum(r, min(KEPT, int(sizes.max()) - 1))


def chunks(need, bytes_per_neighbour: int, max_memory: int, rows_of: int = 1):
    """(k, query indices) for each chunk: queries of equal need together, as many as ``max_memory`` holds
    at ``bytes_per_neighbour`` for each of their ``k + 1`` neighbours (and ``rows_of`` bytes per row)."""
    import numpy as np

    for k in np.unique(need):
        queries = np.flatnonzero(need == k)
        size = max(1, max_memory // (bytes_per_neighbour * (int(k) + 1) + rows_of))
        for start in range(0, len(queries), size):
            yield int(k), queries[start:start + size]


def floor_faiss(embeddings, need, max_memory: int) -> None:
    """faiss ``IndexFlatL2`` asked for each query's k + 1 (itself among them), chunk by chunk."""
    import faiss
    import numpy as np

    index = faiss.IndexFlatL2(embeddings.shape[1])
    index.add(embeddings)
    # chunks as bgbias's ceiling sizes its blocks (BYTES_PER_NEIGHBOUR), so the floor is bgbias's own search
    # without the scoring: at 12 bytes a neighbour (faiss's output) larger chunks made faiss slower here
    for k, queries in chunks(need, 64, max_memory):
        index.search(np.ascontiguousarray(embeddings[queries]), k + 1)


def floor_torch(embeddings, need, max_memory: int, device) -> None:
    """Squared L2 as one matrix product per chunk of queries against every reference, then topk(k + 1)."""
    import torch

    vectors = torch.from_numpy(embeddings).to(device)
    norms = (vectors * vectors).sum(dim=1)
    # the chunk's distance row, then topk's distance, id and index per neighbour
    for k, queries in chunks(need, 20, max_memory, rows_of=4 * len(vectors)):
        chosen = torch.from_numpy(queries).to(device)
        block = vectors[chosen]
        distances = (norms[chosen][:, None] + norms[None, :]).addmm_(block, vectors.T, alpha=-2.0)
        distances.topk(k + 1, dim=1, largest=False).indices.cpu()


def pml_map_at_r(embeddings, labels, device) -> float:
    import torch
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

    options: dict[str, Any] = {}
    if device is not None:
        from pytorch_metric_learning.distances import LpDistance
        from pytorch_metric_learning.utils.inference import CustomKNN

        # in batches of 4,096 queries, PML's own way to bound its distance matrix
        knn = CustomKNN(LpDistance(normalize_embeddings=False), batch_size=4096)
        options = {"knn_func": knn, "device": device}
    calculator = AccuracyCalculator(include=("mean_average_precision_at_r",), k="max_bin_count", **options)
    tensor, targets = torch.from_numpy(embeddings), torch.from_numpy(labels)
    if device is not None:
        tensor, targets = tensor.to(device), targets.to(device)
    scores = calculator.get_accuracy(tensor, targets, tensor, targets, ref_includes_query=True)
    return float(scores["mean_average_precision_at_r"])


def contender(name: str, options: argparse.Namespace) -> dict:
    """Run one contender in this process; its figures."""
    if name == "pml" and options.device is None and options.pml_cap:
        resource.setrlimit(resource.RLIMIT_AS, (options.pml_cap, options.pml_cap))
    import numpy as np

    device = None
    if options.device is not None:
        import torch

        device = torch.device(options.device)
    embeddings, labels = data(options.images, options.dim, options.classes, options.big_class)
    need = needs(labels)
    result: dict = {"k": int(need.max()), "k_least": int(need.min())}
    started, cpu = time.perf_counter(), _cpu_seconds()
    if name == "bgbias":
        if importlib.util.find_spec("bgbias") is None:  # a checkout without bgbias installed
            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from bgbias.retrieval.metrics import score_embeddings
        from bgbias.retrieval.retrievers import ExactL2

        if device is None:
            scores = score_embeddings(embeddings, labels, max_memory=options.max_memory)
        else:
            scores = score_embeddings(torch.from_numpy(embeddings).to(device), labels,
                                      retrieval=ExactL2("torch"), max_memory=options.max_memory)
        result["map_at_r"] = scores.map_at_r
    elif name == "floor":
        if device is None:
            floor_faiss(embeddings, need, options.max_memory)
        else:
            floor_torch(embeddings, need, options.max_memory, device)
    elif name == "pml":
        result["map_at_r"] = pml_map_at_r(embeddings, labels, device)
    else:
        raise SystemExit(f"unknown contender {name!r}: use floor, bgbias or pml")
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)
        result["gpu_peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    result["seconds"] = time.perf_counter() - started
    result["cpu_seconds"] = _cpu_seconds() - cpu
    result["k_mean"] = float(np.mean(need))
    return result


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_contender(name: str, arguments: list[str]) -> tuple[dict | None, str, float]:
    """Run one contender in a child process: its figures (None if it failed), its last error line, and the
    child's peak resident memory in GiB (``ru_maxrss`` from ``wait4``, whether it succeeded or not)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen([sys.executable, __file__, *arguments, "--one", name], stdout=out,
                                 stderr=err, text=True)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        lines, errors = out.read().splitlines(), err.read().strip().splitlines()
    peak = usage.ru_maxrss / 2**20
    if child.returncode == 0 and lines:
        return json.loads(lines[-1]), "", peak
    return None, f"exit {child.returncode}: {(errors or ['?'])[-1]}", peak


def _ratio(value: float, floor: float) -> str:
    return f"{value / floor:.2f}×" if floor > 0 else "—×"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=250_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--classes", type=int, default=10_000)
    parser.add_argument("--big-class", type=int, default=0)
    parser.add_argument("--max-memory", type=int, default=1 << 30, help="bytes (bgbias's default: 1 GiB)")
    parser.add_argument("--device", default=None,
                        help="cuda or cpu: the torch backend there (default: faiss on the CPU)")
    parser.add_argument("--pml-cap", type=int, default=18 << 30,
                        help="PML's address-space cap in bytes without --device (0: none)")
    parser.add_argument("--contenders", default="floor,bgbias,pml")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.one:
        print(json.dumps(contender(options.one, options)))
        return
    if options.device is not None:
        import torch

        if torch.device(options.device).type == "cuda" and not torch.cuda.is_available():
            parser.error(f"--device {options.device}: torch {torch.__version__} sees no CUDA device here")
    arguments = sys.argv[1:]
    print(f"command: python benchmarks/scoring_scale.py {' '.join(arguments)}")
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    floor: dict | None = None
    for name in options.contenders.split(","):
        figures, error, peak = run_contender(name, arguments)
        if figures is None:
            print(f"{name}: failed ({error}), peak {peak:.2f} GiB")
            continue
        floor = figures if name == "floor" else floor
        ratios = (f" ({_ratio(figures['seconds'], floor['seconds'])} wall, "
                  f"{_ratio(figures['cpu_seconds'], floor['cpu_seconds'])} CPU)"
                  if floor is not None and name != "floor" else "")
        gpu = f", GPU peak {figures['gpu_peak_gib']:.2f} GiB" if "gpu_peak_gib" in figures else ""
        score = f", MAP@R {figures['map_at_r']:.6f}" if "map_at_r" in figures else ""
        print(f"{name}: k {figures['k_least']}..{figures['k']} (mean {figures['k_mean']:.1f}), "
              f"{figures['seconds']:.1f} s wall, {figures['cpu_seconds']:.1f} s CPU{ratios}, "
              f"peak {peak:.2f} GiB{gpu}{score}")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
