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

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from torch import nn

from benchmarks.bench_split import bare_forward, bench_split, print_rates, throughput_arguments
from bgbias.engine.embedding import embed_images
from bgbias.engine.external_model import load_external_model
from bgbias.measurement.request import MeasureRequest
from bgbias.models.model_input import ModelInput
from bgbias.report.evaluate import evaluate


def main() -> None:
    args = throughput_arguments(__doc__.splitlines()[0])
    split = bench_split(args)
    device = split.device
    scratch = Path(tempfile.mkdtemp(prefix="external-eval-speed-"))
    path = scratch / "bench-method.pt"
    with torch.no_grad():
        example = split.decoded[:2].to(device).float().div(255)
        torch.jit.save(torch.jit.trace(Embed(split.method), example), str(path))
    model_input = ModelInput(normalize="none")
    model = load_external_model(str(path), model_input, device=str(device), out=scratch / "home")
    scripted = model.network.call

    def embedded() -> float:
        started = time.perf_counter()
        embed_images(model, split.images, device, batch_size=args.batch, workers=args.workers)
        return len(split.images) / (time.perf_counter() - started)

    def evaluated(run: int) -> float:
        started = time.perf_counter()
        fresh = load_external_model(str(path), model_input, device=str(device), out=scratch / f"eval-{run}")
        request = MeasureRequest(dataset="bench", root=args.root, batch_size=args.batch, workers=args.workers,
                                 progress=False)
        evaluate(fresh, request, log=lambda _line: None)
        return len(split.images) / (time.perf_counter() - started)

    # warm-up: first-call allocations, kernel selection and TorchScript's profiling runs
    for _ in range(2):
        bare_forward(split, args.batch, scripted)
    names = ("bare forward of the TorchScript module (images in memory)",
             "bgbias eval --model embedding (loader + forward)",
             "whole clean evaluation (load, embed, rank, report)")
    rates: dict[str, list[float]] = {name: [] for name in names}
    for run in range(args.n):
        rates[names[0]].append(bare_forward(split, args.batch, scripted))
        rates[names[1]].append(embedded())
        rates[names[2]].append(evaluated(run))
    print_rates(args, split, rates)


class Embed(nn.Module):
    """A method's ``embed`` as a module: float RGB in [0, 1] in, its embedding out (what is traced)."""

    def __init__(self, method: nn.Module):
        super().__init__()
        self.method = method

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.method.embed(images)


if __name__ == "__main__":
    main()
