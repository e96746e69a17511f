"""A method's training step relative to its base loss's (the anchor), on the same batches in one run.

    python benchmarks/method_speed.py [--method dcml] [--anchor cosface] [--device cpu|cuda] [--size 128]
                                      [--batch 32] [-n 20] [--backbone mobilenet_v2] [--set loss.X=...]
                                      [--anchor-set loss.X=...]

The anchor defaults to the method's base loss: CosFace for DCML, the triplet loss for SAM, the margin loss
for MetricFormer, ProxyAnchor for AVSL.

Both methods are built on the same random-initialised backbone architecture with the bench's configuration
(``--size``-px crops, ``--batch`` images, 4 per class) and trained with their own optimizer groups. Steps
alternate (anchor, method, method, anchor, …) over the same four batches of random images, so that drift of
a noisy machine hits both alike; ``-n`` timed steps each after two warm-up rounds. The table gives medians,
and the method's step time as a ratio of the anchor's.

Memory of one step, after the timing: on CUDA the peak allocated during the step above what was allocated
before it; on a CPU, where torch keeps no allocator statistics, the tensors the step holds for backward
(unique storages, parameters excluded, including those a double backward saves), which is what a step adds
to the model's own memory at its peak.

Eval-mode embedding, after the training steps: each model's ``embed`` of the same batches without gradients,
alternated ABBA too, as a ratio of the anchor's (whose ``embed`` is the plain backbone, pooling and linear
head).

A method that learns per-sample state between epochs (``on_epoch_start``, e.g. DCML's environment learner)
has that cost measured too: one pass of its update over ``--passes-of`` batches, per batch, as a ratio of
the anchor's training step.
"""

from __future__ import annotations

import argparse
import platform
import shlex
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.timing import timed
from bgbias.engine.config import resolve_config
from bgbias.engine.device import resolve_device
from bgbias.engine.training_build import build_optimizer
from bgbias.methods.base import Batch, MethodSpec
from bgbias.methods.registry import method_class
from bgbias.models.registry import build_backbone

CLASSES = 100
ANCHORS = {"dcml": "cosface", "sam": "triplet", "metricformer": "margin", "avsl": "proxy_anchor"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="dcml")
    parser.add_argument("--anchor", default=None, help="default: the method's base loss (ANCHORS)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--backbone", default="mobilenet_v2")
    parser.add_argument("--size", type=int, default=128, help="crop side of the training images")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("-n", type=int, default=20, help="timed steps per method")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a configuration override of the method (not the anchor): loss.stage=stride16")
    parser.add_argument("--anchor-set", action="append", default=[], metavar="KEY=VALUE",
                        help="a configuration override of the anchor: loss.distance_weighted=true")
    args = parser.parse_args()
    args.anchor = args.anchor or ANCHORS.get(args.method, "triplet")

    import torch

    device = resolve_device(args.device)
    models = {name: build(name, args, device, args.set if name == args.method else args.anchor_set)
              for name in (args.anchor, args.method)}
    batches = [random_batch(args, device, seed) for seed in range(4)]
    times = time_steps(models, batches, args.n, device)
    anchor = statistics.median(times[args.anchor])
    memory = {name: step_memory(*models[name], batches[0], device) for name in models}

    print(f"command: python {shlex.join(sys.argv)}")
    print(f"machine: {platform.machine()}, {torch.get_num_threads()} torch threads, device {device}, "
          f"torch {torch.__version__}, {args.backbone}, batch {args.batch} at {args.size} px, n = {args.n}\n")
    kind = "peak MiB" if device.type == "cuda" else "MiB held for backward"
    print(f"| step | ms/batch (median) | images/s | × anchor | {kind} | memory × anchor |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, seconds in times.items():
        median = statistics.median(seconds)
        label = f"{name} (anchor)" if name == args.anchor else name
        print(f"| {label} | {1000 * median:.1f} | {args.batch / median:.1f} | {median / anchor:.2f} | "
              f"{memory[name] / 2**20:.1f} | {memory[name] / memory[args.anchor]:.2f} |")
    embed_times = time_embeddings(models, batches, args.n, device)
    embed_anchor = statistics.median(embed_times[args.anchor])
    for name, seconds in embed_times.items():
        median = statistics.median(seconds)
        label = f"{name} embed, eval mode" + (" (anchor)" if name == args.anchor else "")
        ratio = median / embed_anchor
        print(f"| {label} | {1000 * median:.1f} | {args.batch / median:.1f} | {ratio:.2f} | | |")
    method, _ = models[args.method]
    if hasattr(method, "environment_objective"):
        update = time_environment_step(method, batches, args.n, device)
        print(f"| {args.method} environment learner, per batch of {args.batch} | {1000 * update:.1f} | "
              f"{args.batch / update:.1f} | {update / anchor:.2f} | | |")


def build(name: str, args, device, overrides: list[str]):
    import torch

    config = resolve_config(name, "bench", overrides=[
        f"model.backbone={args.backbone}", "model.pretrained=false", f"data.batch_size={args.batch}",
        "data.m_per_class=4", *overrides,
    ])
    torch.manual_seed(0)
    backbone = build_backbone(args.backbone, pretrained=False)
    spec = MethodSpec(config.model.embedding_dim, CLASSES, 4 * args.batch, options=dict(config.loss),
                      input_size=args.size)
    method = method_class(name)(backbone, spec).to(device).train()
    return method, build_optimizer(config, method)


def random_batch(args, device, seed: int) -> Batch:
    import torch

    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(args.batch, 3, args.size, args.size, generator=generator)
    labels = torch.arange(args.batch // 4).repeat_interleave(4) + seed * (args.batch // 4) % CLASSES
    indices = torch.arange(args.batch) + seed * args.batch
    return Batch(images.to(device), labels.to(device), indices.to(device))


def time_steps(models, batches, n, device) -> dict[str, list[float]]:
    """Alternate the methods' training steps in ABBA order; wall seconds per step, warm-up excluded."""
    return alternate(models, batches, n, device, step)


def time_embeddings(models, batches, n, device) -> dict[str, list[float]]:
    """Alternate the methods' eval-mode ``embed`` (no gradients) in ABBA order; models go back to training."""
    import torch

    for method, _ in models.values():
        method.eval()
    with torch.inference_mode():
        times = alternate(models, batches, n, device, lambda method, _, batch: method.embed(batch.images))
    for method, _ in models.values():
        method.train()
    return times


def alternate(models, batches, n, device, call) -> dict[str, list[float]]:
    """Wall seconds of ``call(method, optimizer, batch)`` per model, in ABBA order, two warm-up rounds
    excluded."""
    names = list(models)
    times: dict[str, list[float]] = {name: [] for name in names}
    for index in range(n + 2):
        order = names if index % 2 == 0 else names[::-1]
        batch = batches[index % len(batches)]
        for name in order:
            method, optimizer = models[name]
            seconds = timed(lambda m=method, o=optimizer, b=batch: call(m, o, b), device)
            if index >= 2:
                times[name].append(seconds)
    return times


def step(method, optimizer, batch) -> None:
    loss = method.loss(batch)["loss"]
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def step_memory(method, optimizer, batch, device) -> int:
    """Bytes one training step needs beyond the model (see the module docstring)."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        step(method, optimizer, batch)
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    parameters = {p.untyped_storage().data_ptr() for p in method.parameters()}
    held: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            held[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        step(method, optimizer, batch)
    return sum(held.values())


def time_environment_step(method, batches, n, device) -> float:
    """Median seconds of one environment-learner step (frozen model, gradient in the weights only)."""
    import torch

    method.eval()
    samples = 4 * len(batches[0].labels)
    logits = torch.randn(samples, method.attention.copies, device=device, requires_grad=True)

    def one(batch):
        value = method.environment_objective(batch, logits[batch.indices].softmax(dim=1))
        torch.autograd.grad(-value, [logits])

    cycle = [batches[i % len(batches)] for i in range(n + 2)]
    seconds = [timed(lambda b=batch: one(b), device) for batch in cycle][2:]
    method.train()
    return statistics.median(seconds)


if __name__ == "__main__":
    main()
