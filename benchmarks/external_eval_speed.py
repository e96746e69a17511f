"""`bgbias eval --model` on a TorchScript file vs a bare forward pass of the same module, in one run.

    python benchmarks/external_eval_speed.py [--device cpu|cuda] [--batch 64] [--workers 2] [-n 3]
                                             [--root DATA/bench]

The bench method (MobileNetV2 → 128-d, random weights: speed does not depend on their values) is traced to a
TorchScript file, which is loaded back as ``bgbias eval --model`` loads it (RGB in [0, 1] in, so
``--normalize none``; L2-normalised out, the default). The bare forward pass gets the bench's clean test split
already decoded, cropped and stacked in memory, and only moves each batch to the device, scales it and calls
the TorchScript module. Two paths are timed against it: the embedding of ``bgbias eval --model``
(``embed_images`` over ``EvalImages``, DataLoader workers decoding while the model runs), and the whole clean
evaluation (``evaluate``: the dataset, the model's fingerprint, embedding, ranking, report files) into a fresh
folder each time. They alternate, ``-n`` times each; the table shows median images/s and the ratio to the bare
pass (goal: ``bgbias eval --model`` ≥ 0.9× bare).
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

import torch
from torch import nn

from bgbias.data.eval_images import EvalImages
from bgbias.data.registry import open_dataset
from bgbias.data.splits import split_items
from bgbias.data.transforms import eval_geometry
from bgbias.engine.config import resolve_config
from bgbias.engine.device import resolve_device
from bgbias.engine.embedding import embed_images
from bgbias.engine.external_model import load_external_model
from bgbias.engine.request import MeasureRequest
from bgbias.engine.training import build_method
from bgbias.models.model_input import ModelInput
from bgbias.report.evaluate import evaluate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("-n", type=int, default=3, help="timed passes of each")
    parser.add_argument("--root", type=Path, default=Path("data/bench"))
    args = parser.parse_args()

    device = resolve_device(args.device)
    dataset = open_dataset("bench", args.root)
    items = split_items(dataset, "test")
    config = resolve_config("multi_similarity", "bench", overrides=["model.pretrained=false"])
    method = build_method(config, split_items(dataset, "train"), input_size=128).to(device).eval()
    images = EvalImages(items, eval_geometry("bench"))
    decoded = torch.stack([images[i]["image"] for i in range(len(images))])
    scratch = Path(tempfile.mkdtemp(prefix="external-eval-speed-"))
    path = scratch / "bench-method.pt"
    with torch.no_grad():
        example = decoded[:2].to(device).float().div(255)
        torch.jit.save(torch.jit.trace(Embed(method), example), str(path))
    model_input = ModelInput(normalize="none")
    model = load_external_model(str(path), model_input, device=str(device), out=scratch / "home")
    scripted = model.network.call

    def bare() -> float:
        started = time.perf_counter()
        with torch.inference_mode():
            for start in range(0, len(decoded), args.batch):
                batch = decoded[start : start + args.batch].to(device, non_blocking=True).float().div_(255)
                scripted(batch).cpu()
        return len(decoded) / (time.perf_counter() - started)

    def embedded() -> float:
        started = time.perf_counter()
        embed_images(model, images, device, batch_size=args.batch, workers=args.workers)
        return len(images) / (time.perf_counter() - started)

    def evaluated(run: int) -> float:
        started = time.perf_counter()
        fresh = load_external_model(str(path), model_input, device=str(device), out=scratch / f"eval-{run}")
        request = MeasureRequest(dataset="bench", root=args.root, batch_size=args.batch, workers=args.workers,
                                 progress=False)
        evaluate(fresh, request, log=lambda _line: None)
        return len(images) / (time.perf_counter() - started)

    bare()  # warm-up: first-call allocations, kernel selection and TorchScript's profiling runs
    bare()
    names = ("bare forward of the TorchScript module (images in memory)",
             "bgbias eval --model embedding (loader + forward)",
             "whole clean evaluation (load, embed, rank, report)")
    rates: dict[str, list[float]] = {name: [] for name in names}
    for run in range(args.n):
        rates[names[0]].append(bare())
        rates[names[1]].append(embedded())
        rates[names[2]].append(evaluated(run))
    anchor = statistics.median(rates[names[0]])
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


class Embed(nn.Module):
    """A method's ``embed`` as a module: float RGB in [0, 1] in, its embedding out (what is traced)."""

    def __init__(self, method: nn.Module):
        super().__init__()
        self.method = method

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.method.embed(images)


if __name__ == "__main__":
    main()
