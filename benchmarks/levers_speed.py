"""One method's training step and eval-mode embedding under each hardware lever, against today's default
(float32, contiguous) as the anchor, in one run.

    python benchmarks/levers_speed.py [--method multi_similarity] [--backbone mobilenet_v2] [--size 128]
                                      [--batch 32] [-n 20] [--device cpu|cuda]

The levers are the memory layout (``model.memory_format``: contiguous or channels_last) and autocast to
bfloat16 (``amp``: off or bf16; bf16 only where :func:`bgbias.engine.device.cpu_has_native_bf16` or CUDA
allows it), each combination a copy of the same randomly initialised method built as
``benchmarks/method_speed.py`` builds it. Steps alternate in ABBA order over the same four batches of random
images, two warm-up rounds excluded; the table gives medians and each lever's speed-up over the anchor
(anchor time / lever time).
"""

from __future__ import annotations

import argparse
import platform
import shlex
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.method_speed import alternate, build, random_batch, step
from bgbias.engine.device import autocast, cpu_has_native_bf16, memory_format, resolve_device

LEVERS = (("float32, contiguous (anchor)", "off", "contiguous"),
          ("float32, channels-last", "off", "channels_last"),
          ("bf16, contiguous", "bf16", "contiguous"),
          ("bf16, channels-last", "bf16", "channels_last"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="multi_similarity")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--backbone", default="mobilenet_v2")
    parser.add_argument("--size", type=int, default=128, help="crop side of the images")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("-n", type=int, default=20, help="timed steps per lever")
    args = parser.parse_args()

    import torch

    device = resolve_device(args.device)
    bf16 = device.type == "cuda" or cpu_has_native_bf16()
    levers = [lever for lever in LEVERS if bf16 or lever[1] == "off"]
    models = {}
    for label, amp, layout in levers:
        method, optimizer = build(args.method, args, device, [])
        method.set_memory_format(memory_format(layout))
        models[label] = (method, optimizer, torch.bfloat16 if amp == "bf16" else None)
    batches = [random_batch(args, device, seed) for seed in range(4)]

    def under_autocast(call):
        return lambda entry, optimizer, batch: _with_amp(entry, optimizer, batch, call, device)

    steps = alternate(_pairs(models), batches, args.n, device, under_autocast(step))
    for method, _, _ in models.values():
        method.eval()  # the embeddings of retrieval, without gradients
    with torch.inference_mode():
        embeds = alternate(_pairs(models), batches, args.n, device,
                           under_autocast(lambda method, _, batch: method.embed(batch.images)))

    print(f"command: python {shlex.join(sys.argv)}")
    print(f"machine: {platform.machine()}, {_processor()}, {torch.get_num_threads()} torch "
          f"threads, device {device}, native bf16 {bf16}, torch {torch.__version__}, {args.method} on "
          f"{args.backbone}, batch {args.batch} at {args.size} px, n = {args.n}\n")
    print("| lever | step ms (median) | step speed-up | embed ms (median) | embed speed-up |")
    print("|---|---:|---:|---:|---:|")
    anchor_step, anchor_embed = (statistics.median(times[LEVERS[0][0]]) for times in (steps, embeds))
    for label, _, _ in levers:
        step_ms, embed_ms = statistics.median(steps[label]), statistics.median(embeds[label])
        print(f"| {label} | {1000 * step_ms:.1f} | {anchor_step / step_ms:.2f}× | {1000 * embed_ms:.1f} | "
              f"{anchor_embed / embed_ms:.2f}× |")


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


def _with_amp(entry, optimizer, batch, call, device):
    method, dtype = entry
    with autocast(device, dtype):
        return call(method, optimizer, batch)


if __name__ == "__main__":
    main()
