"""Where a mask run's time goes on one device: the network alone, the pipeline around an instant network, and
the real pipeline with each step's summed time.

    python benchmarks/masks_steps.py --images DIR [--device cuda|cpu] [-n 300]

``--images DIR`` gives the first N JPEGs (sorted by name; the GPU record used 300 of
``benchmarks/masks_backends.py``'s default photos, saved to a folder). Printed, in order:

- *forward only*: ms per image of u2netp (its file, from ``$U2NET_HOME``) and of u2net's architecture with
  random weights, by batch size and precision (``fp32``, ``tf32``: cuDNN's TF32 convolutions, ``bf16``,
  ``fp16``), on a random channels-last input on the main thread, after two warm-up calls;
- *pipelines*: ``write_masks`` images/s with an instant network (the decode/shrink/finish/write ceiling of
  this machine's cores), into ``/tmp`` and ``/dev/shm``; then u2netp sessions for real; each with the summed
  time of every ``prepare``, ``infer`` and ``finish`` call in ms per image (calls overlap on worker threads).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bgbias.data.items import make_item
from bgbias.saliency.pipeline import write_masks
from bgbias.saliency.sessions import Inference, open_session
from bgbias.saliency.torch_session import Stretched
from bgbias.saliency.u2net_network import U2NET, U2Net

AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}
FORWARD_GRID = ((1, ("fp32", "tf32", "bf16", "fp16")), (32, ("fp32", "tf32", "bf16", "fp16")),
                (64, ("bf16", "fp16")))
PIPELINES = (("instant network", 32, "off", True, "/tmp"), ("instant network", 32, "off", True, "/dev/shm"),
             ("u2netp b1 fp32", 1, "off", False, "/tmp"), ("u2netp b32 fp32", 32, "off", False, "/tmp"),
             ("u2netp b32 fp16", 32, "fp16", False, "/tmp"))


def forward_ms(network: torch.nn.Module, batch: int, mode: str, device: str, iterations: int) -> float:
    """ms per image of ``network`` on a random batch, after two warm-up calls."""
    x = torch.randn(batch, 3, 320, 320, device=device).contiguous(memory_format=torch.channels_last)
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = mode == "tf32"
    autocast = AUTOCAST.get(mode)

    def once() -> None:
        with torch.inference_mode(), torch.autocast(device, dtype=autocast, enabled=autocast is not None):
            network(x)

    for _ in range(2):
        once()
    synchronize(device)
    started = time.perf_counter()
    for _ in range(iterations):
        once()
    synchronize(device)
    return 1000 * (time.perf_counter() - started) / iterations / batch


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def summed(function: Callable, totals: dict[str, float], key: str) -> Callable:
    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            totals[key] += time.perf_counter() - started
    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("-n", type=int, default=300)
    parser.add_argument("--images", type=Path, required=True, help="a folder of JPEG photos")
    args = parser.parse_args()
    on_cpu = args.device == "cpu"
    paths = sorted(args.images.glob("*.jpg"))[:args.n]
    items = [make_item(args.images, path.name, 0) for path in paths]

    torch.manual_seed(0)
    random_u2net = U2Net(U2NET).to(args.device, memory_format=torch.channels_last).eval()
    networks = {"u2netp": open_session("u2netp", Inference(backend="torch", device=args.device))._network,
                "u2net (random weights)": random_u2net}
    print("forward only, ms per image", flush=True)
    for name, network in networks.items():
        for batch, modes in FORWARD_GRID:
            if on_cpu and batch > 1:
                continue
            iterations = 2 if on_cpu else (10 if batch == 1 else 4)
            cells = [f"{mode} {forward_ms(network, batch, mode, args.device, iterations):.2f}"
                     for mode in modes]
            print(f"  {name} b{batch}: " + ", ".join(cells), flush=True)
    torch.backends.cudnn.allow_tf32 = True

    y, x = np.mgrid[0:320, 0:320]
    blob = (255 / (1 + np.exp(-((60**2 - (x - 160) ** 2 - (y - 150) ** 2) / 800)))).astype(np.uint8)
    print("pipelines", flush=True)
    for label, batch, amp, instant, base in PIPELINES:
        if on_cpu and (amp != "off" or not os.path.isdir(base)):
            continue
        session = open_session("u2netp", Inference(backend="torch", device=args.device, amp=amp, batch=batch))
        totals = dict.fromkeys(("prepare", "infer", "finish"), 0.0)
        if instant:
            session.infer = lambda prepared: [Stretched(blob, 0.0, 1.0) for _ in prepared]
        for step in totals:
            setattr(session, step, summed(getattr(session, step), totals, step))
        warm = Path(tempfile.mkdtemp(dir=base))
        write_masks(items[:64], warm, session, progress=False)
        shutil.rmtree(warm)
        totals.update(dict.fromkeys(totals, 0.0))
        out = Path(tempfile.mkdtemp(dir=base))
        started = time.perf_counter()
        write_masks(items, out, session, progress=False)
        seconds = time.perf_counter() - started
        shutil.rmtree(out)
        steps = ", ".join(f"{step} {1000 * value / len(items):.2f}" for step, value in totals.items())
        print(f"  {label} into {base}: {len(items) / seconds:.1f} images/s; summed ms per image: {steps}",
              flush=True)


if __name__ == "__main__":
    main()
