"""AVSL's exact pairwise ranking: its achieved FLOP rate against a plain matmul of the same arithmetic, its
peak memory at two split sizes, and the time it projects for SOP's test split.

    python benchmarks/avsl_pairwise.py [--device cpu|cuda] [--r 512] [--n 5924] [--queries 256]
                                       [--memory-sizes 2000 8000] [--project 60502]

Random per-image states of ``--n`` images (three unit level embeddings of ``--r`` dimensions and two levels'
certainties, CUB's test size by default) and a random graph (edges with positive correlations, top-k = r/4,
random reliability parameters) stand for a trained model: the arithmetic does not depend on the values.
``--queries`` of the images are ranked against all ``--n`` through the method's own retrieval (the exact,
blocked, streaming top-k search that evaluation uses), so a CPU finishes in minutes; the full N × N time
is that rate times N² pairs.

The anchor, in the same run: the same number of pairs pushed through two plain ``(pairs, r) @ (r, r)``
matmuls, the two rectification products that dominate AVSL's per-pair cost (2 · 2 · r² FLOPs a pair). The
ratio is the anchor's time over AVSL's: the fraction of a bare matmul's FLOP rate that the whole d̂
computation (differences, reliabilities, blending, top-k) achieves.

Memory: each size runs in a fresh process; on CUDA the peak allocated during the search, on a CPU the peak
resident set of the process while it searches (sampled every millisecond) minus what it held before (the
states themselves included in neither), so a flat figure across sizes shows the blocks bound it.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.timing import timed
from bgbias.engine.device import resolve_device
from bgbias.methods.avsl.method import AVSL
from bgbias.methods.base import MethodSpec
from bgbias.models.registry import build_backbone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--r", type=int, default=512, help="embedding size per level")
    parser.add_argument("--n", type=int, default=5924, help="images in the split (CUB's test split)")
    parser.add_argument("--queries", type=int, default=256, help="images ranked against the whole split")
    parser.add_argument("--memory-sizes", type=int, nargs=2, default=(2000, 8000))
    parser.add_argument("--project", type=int, default=60502, help="split size to project (SOP's test)")
    parser.add_argument("--memory-probe", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()

    import torch

    device = resolve_device(args.device)
    if args.memory_probe is not None:
        print(json.dumps({"peak_bytes": search_memory(args, device, args.memory_probe)}))
        return
    method = random_avsl(args.r, device)
    state = random_state(args.n, args.r, device, seed=0)
    queries = torch.arange(args.queries).numpy()
    search = method.retrieval()
    from bgbias.retrieval.search import torch_ranking

    def avsl() -> None:
        torch_ranking(state, 10, distance=search.distance, device=device, query_rows=search.query_rows,
                      reference_rows=search.reference_rows, queries=queries).on_host()

    pairs = args.queries * args.n
    edges = method.graph().edges
    block = min(pairs, search.query_rows * search.reference_rows)
    lower = torch.rand(block, args.r, device=device)

    def matmuls() -> None:
        for _ in range(pairs // block):
            for w in edges:
                lower @ w.T

    avsl()  # warm-up
    rounds = [(timed(avsl, device), timed(matmuls, device)) for _ in range(3)]
    t_avsl = sorted(r[0] for r in rounds)[1]
    t_mm = sorted(r[1] for r in rounds)[1] * pairs / ((pairs // block) * block)
    flops = pairs * 2 * 2 * args.r ** 2
    memory = [probe(args, size) for size in args.memory_sizes]

    print(f"command: python {shlex.join(sys.argv)}")
    print(f"machine: {platform.machine()}, {torch.get_num_threads()} torch threads, device {device}, "
          f"torch {torch.__version__}; r = {args.r}, top-k = {method.top_k}, {args.queries} queries x "
          f"{args.n} images = {pairs:,} pairs, median of 3\n")
    print("| computation | seconds | pairs/s | GFLOP/s (2·2·r² a pair) | × matmul rate |")
    print("|---|---:|---:|---:|---:|")
    print(f"| plain matmuls (anchor) | {t_mm:.2f} | {pairs / t_mm:,.0f} | {flops / t_mm / 1e9:.1f} | 1.00 |")
    print(f"| AVSL d̂, exact ranking | {t_avsl:.2f} | {pairs / t_avsl:,.0f} | {flops / t_avsl / 1e9:.1f} | "
          f"{t_mm / t_avsl:.2f} |")
    for n in (args.n, args.project):
        print(f"\nprojected N x N ranking, N = {n:,}: {n * n / (pairs / t_avsl):,.0f} s")
    print("\n| split size | peak memory of the search (MiB) |")
    print("|---:|---:|")
    for size, peak in zip(args.memory_sizes, memory, strict=True):
        print(f"| {size:,} | {peak / 2**20:.0f} |")


def random_avsl(r: int, device) -> AVSL:
    """An AVSL of embedding size ``r`` whose graph is random: the edges of every link have positive
    correlations for every high node, the reliability parameters vary by node."""
    import torch

    torch.manual_seed(0)
    spec = MethodSpec(r, 10, 100, options={}, input_size=32)
    method = AVSL(build_backbone("tiny_cnn", pretrained=False), spec).to(device).eval()
    with torch.no_grad():
        for edges in method.collector.edges():
            edges.copy_(torch.rand(r, r, device=device) - 0.2)
        for slope, bias in zip(method.collector.slope, method.collector.bias, strict=True):
            slope.copy_(1 + torch.randn(r, device=device))
            bias.copy_(0.1 * torch.randn(r, device=device))
    return method


def random_state(n: int, r: int, device, seed: int) -> dict:
    """``n`` images' state as AVSL's ``embed`` returns it: three unit level embeddings side by side, and
    two levels' certainties (small positive numbers, as L1-normalised maps' spreads are)."""
    import torch
    import torch.nn.functional as F

    generator = torch.Generator().manual_seed(seed)
    units = [F.normalize(torch.randn(n, r, generator=generator), dim=1) for _ in range(3)]
    certainty = 0.05 * torch.rand(n, 2 * r, generator=generator)
    return {"embedding": torch.cat(units, dim=1).to(device), "certainty": certainty.to(device)}


def probe(args, size: int) -> int:
    """Peak bytes of one search over ``size`` images, measured in a fresh process."""
    command = [sys.executable, __file__, "--device", args.device, "--r", str(args.r), "--queries",
               str(args.queries), "--memory-probe", str(size)]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return int(json.loads(out.strip().splitlines()[-1])["peak_bytes"])


def search_memory(args, device, size: int) -> int:
    """Peak bytes the search over ``size`` images adds (see the module docstring)."""
    import torch

    from bgbias.retrieval.search import torch_ranking

    method = random_avsl(args.r, device)
    state = random_state(size, args.r, device, seed=1)
    search = method.retrieval()
    queries = torch.arange(min(args.queries, size)).numpy()

    def run() -> None:
        torch_ranking(state, 10, distance=search.distance, device=device, query_rows=search.query_rows,
                      reference_rows=search.reference_rows, queries=queries).on_host()

    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        run()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    return peak_resident_growth(run)


def peak_resident_growth(function) -> int:
    """The largest resident set of this process while ``function`` runs, above the one before it, sampled
    every millisecond from /proc/self/statm (Linux), since freed blocks leave the high-water mark alone."""
    import os
    import threading
    import time

    page = os.sysconf("SC_PAGE_SIZE")

    def resident() -> int:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * page

    before, peak, done = resident(), [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], resident())
            time.sleep(0.001)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        function()
    finally:
        done.set()
        sampler.join()
    return max(0, peak[0] - before)


if __name__ == "__main__":
    main()
