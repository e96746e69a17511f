"""Every method's training step, its memory and its eval-mode embedding under each hardware lever, against
float32/contiguous (the defaults before issue 31) as the anchor, in one run; and SmoothGrad's images/s.

    python benchmarks/levers_speed.py [--methods all|NAME,NAME] [--backbone mobilenet_v2] [--size 128]
                                      [--batch 32] [-n 10] [--device cpu|cuda] [--smoothgrad 4] [--compile]

The levers are the memory layout (``model.memory_format``: contiguous or channels_last) and the backbone's
autocast to bfloat16 (``amp``: off or bf16, :mod:`bgbias.models.precision`; bf16 only where
:func:`bgbias.engine.device.cpu_has_native_bf16` or CUDA allows it). For each method, each combination
is a copy of the same randomly initialised method built as
``benchmarks/method_speed.py`` builds it; the copies' steps alternate in ABBA order over the same four
batches of random images, two warm-up rounds excluded, and the table gives the anchor's median and each
lever's speed-up (anchor time / lever time). Memory is what one step needs beyond the model
(``method_speed.step_memory``: the CUDA peak, or on a CPU the tensors held for backward).

SmoothGrad (the paper's attribution, float32: gradients are not taken under autocast) runs on the first
method's model in both layouts, alternated, over ``--smoothgrad`` images with its default 25 noisy copies.

``--compile`` adds the last lever with ``model.compile`` (every backbone stage through ``torch.compile``): its
steady speed in the table, and the first training step and first embedding, which compile, apart.
"""

from __future__ import annotations

import argparse
import gc
import platform
import shlex
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.method_speed import alternate, build, random_batch, step, step_memory
from benchmarks.timing import timed
from bgbias.engine.device import cpu_has_native_bf16, memory_format, resolve_device
from bgbias.methods.registry import method_names
from bgbias.models.precision import network_precision

ANCHOR = "fp32"
LEVERS = ((ANCHOR, "off", "contiguous"),
          ("CL", "off", "channels_last"),
          ("bf16", "bf16", "contiguous"),
          ("bf16+CL", "bf16", "channels_last"))
"""(label, amp, memory format): fp32 is float32 and contiguous; CL is channels-last."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="all", help="comma-separated method names, or all")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--backbone", default="mobilenet_v2")
    parser.add_argument("--size", type=int, default=128, help="crop side of the images")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("-n", type=int, default=10, help="timed steps per lever")
    parser.add_argument("--smoothgrad", type=int, default=0, metavar="IMAGES",
                        help="also time SmoothGrad on this many images (0: not)")
    parser.add_argument("--compile", action="store_true",
                        help="also the fastest lever with model.compile (its first step and first embedding, "
                             "which compile, timed apart)")
    args = parser.parse_args()

    import torch

    device = resolve_device(args.device)
    bf16 = device.type == "cuda" or cpu_has_native_bf16()
    levers = [lever for lever in LEVERS if bf16 or lever[1] == "off"]
    if args.compile:
        levers.append((f"{levers[-1][0]}+compile", *levers[-1][1:]))
    names = method_names() if args.methods == "all" else args.methods.split(",")
    batches = [random_batch(args, device, seed) for seed in range(4)]

    print(f"command: python {shlex.join(sys.argv)}")
    print(f"machine: {platform.machine()}, {_processor()}, {torch.get_num_threads()} torch threads, device "
          f"{device}, native bf16 {bf16}, torch {torch.__version__}, {args.backbone}, batch {args.batch} at "
          f"{args.size} px, n = {args.n}\n")
    memory_kind = "peak MiB" if device.type == "cuda" else "MiB held for backward"
    others = [label for label, _, _ in levers[1:]]
    print(f"Step and embed: {ANCHOR}'s median ms, then each lever's speed-up (× {ANCHOR}); memory: "
          f"{ANCHOR}'s {memory_kind} of one step, then each lever's as a ratio of it. CL: channels-last.\n")
    print("| method | step ms | " + " | ".join(f"step {label}" for label in others)
          + " | MiB | " + " | ".join(f"MiB {label}" for label in others)
          + " | embed ms | " + " | ".join(f"embed {label}" for label in others) + " |")
    print("|---|" + "---:|" * (3 * len(levers)))
    compiled: list[str] = []
    for name in names:
        models = _lever_models(name, levers, args, device)
        first = {label: _first_calls(model, batches[0], device) for label, model in models.items()
                 if label.endswith("+compile")}
        steps = alternate(_pairs(models), batches, args.n, device, _in_precision(step))
        memory = {label: _memory(models[label], batches[0], device) for label in models}
        for method, _, _ in models.values():
            method.eval()  # the embeddings of retrieval, without gradients
        with torch.inference_mode():
            embeds = alternate(_pairs(models), batches, args.n, device,
                               _in_precision(lambda method, _, batch: method.embed(batch.images)))
        step_ms = {label: statistics.median(times) for label, times in steps.items()}
        embed_ms = {label: statistics.median(times) for label, times in embeds.items()}
        print(f"| {name} | {1000 * step_ms[ANCHOR]:.1f} | "
              + " | ".join(f"{step_ms[ANCHOR] / step_ms[label]:.2f}" for label in others)
              + f" | {memory[ANCHOR] / 2**20:.1f} | "
              + " | ".join(f"{memory[label] / memory[ANCHOR]:.2f}" for label in others)
              + f" | {1000 * embed_ms[ANCHOR]:.1f} | "
              + " | ".join(f"{embed_ms[ANCHOR] / embed_ms[label]:.2f}" for label in others) + " |",
              flush=True)
        compiled.extend(f"{name}, {label}: first step (compiling) {step_s:.1f} s, first embedding "
                        f"(compiling) {embed_s:.1f} s" for label, (step_s, embed_s) in first.items())
        del models
        gc.collect()
    for line in compiled:
        print(f"\n{line}")
    if args.smoothgrad:
        _time_smoothgrad(names[0], args, device)


def _lever_models(name: str, levers, args, device) -> dict:
    """One copy of method ``name`` per lever: (method, optimizer, autocast dtype)."""
    import torch

    models = {}
    for label, amp, layout in levers:
        method, optimizer = build(name, args, device, [])
        method.set_memory_format(memory_format(layout))
        method.backbone.compile_stages(label.endswith("+compile"))
        models[label] = (method, optimizer, torch.bfloat16 if amp == "bf16" else None)
    return models


def _first_calls(model, batch, device) -> tuple[float, float]:
    """Seconds of a compiled model's first training step and first eval-mode embedding (they compile)."""
    import torch

    method, optimizer, dtype = model
    with network_precision(dtype):
        step_seconds = timed(lambda: step(method, optimizer, batch), device)
        method.eval()
        with torch.inference_mode():
            embed_seconds = timed(lambda: method.embed(batch.images), device)
    method.train()
    return step_seconds, embed_seconds


def _memory(model, batch, device) -> int:
    method, optimizer, dtype = model
    with network_precision(dtype):
        return step_memory(method, optimizer, batch, device)


def _time_smoothgrad(name: str, args, device) -> None:
    """SmoothGrad images/s of method ``name`` contiguous vs channels-last (float32), alternated ABBA."""
    import torch

    from bgbias.attribution.smoothgrad import SmoothGrad
    from bgbias.engine.method_model import MethodModel

    smoothgrad = SmoothGrad()
    images = torch.rand(args.smoothgrad, 3, args.size, args.size, generator=torch.Generator().manual_seed(0))
    models = {}
    for layout in ("contiguous", "channels_last"):
        method, _ = build(name, args, device, [])
        method.set_memory_format(memory_format(layout))
        models[layout] = MethodModel(method, device=device).eval()
    times: dict[str, list[float]] = {layout: [] for layout in models}
    for round_index in range(4):
        order = list(models) if round_index % 2 == 0 else list(models)[::-1]
        for layout in order:
            seconds = timed(lambda m=models[layout]: smoothgrad(m, images.to(device),
                                                               torch.Generator().manual_seed(0)), device)
            if round_index >= 1:
                times[layout].append(seconds)
    anchor = statistics.median(times["contiguous"])
    print(f"\nSmoothGrad ({smoothgrad.copies} noisy copies, float32) on {name}, {args.smoothgrad} images "
          f"at {args.size} px, 3 timed rounds after one warm-up:\n")
    print("| layout | s per round (median) | images/s | speed-up |")
    print("|---|---:|---:|---:|")
    for layout, seconds in times.items():
        median = statistics.median(seconds)
        print(f"| {layout} | {median:.2f} | {args.smoothgrad / median:.2f} | {anchor / median:.2f} |")


def _processor() -> str:
    """The CPU's model name (Linux), else what platform says."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def _pairs(models):
    """``alternate`` takes (method, optimizer) pairs: the autocast dtype travels with the method."""
    return {label: ((method, dtype), optimizer) for label, (method, optimizer, dtype) in models.items()}


def _in_precision(call):
    def with_amp(entry, optimizer, batch):
        method, dtype = entry
        with network_precision(dtype):
            return call(method, optimizer, batch)
    return with_amp


if __name__ == "__main__":
    main()
