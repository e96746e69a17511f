"""What keeping freed host memory (:mod:`bgbias.host_memory`) saves on the CPU: one run, ratios in it.

    python benchmarks/host_memory.py [--rounds 3] [--steps 6] [--workloads NAME,...] [--json OUT]

Every workload runs in a fresh Python process, once as bgbias runs it (glibc's malloc set when the run
settles its device) and once with glibc's defaults (``BGBIAS_KEEP_FREED_MEMORY=0`` in that child's
environment; nothing else differs). The two alternate ``--rounds`` times (A B, then B A, ...). Each child
times ``--steps`` steps after two warm-up steps and reports its median wall time per step, and per step its
system CPU time and minor page faults, and its peak resident memory; the table shows the medians over the
rounds and the ratio of glibc's defaults to bgbias's.

Workloads (weights drawn at random: speed does not depend on their values), each through bgbias's own code:

- ``train-bench``: a training step of the bench method (multi-similarity on MobileNetV2 at 128 px, batch 32)
  as the engine takes it (``TrainingSession.step``, uint8 batches made into floats);
- ``embed-bench``: an embedding pass of that model over a batch (``method.embed``, bgbias's precision);
- ``embed-paper``: the same at the paper's setting (BN-Inception at 227 px, batch 32);
- ``train-paper``: a training step at the paper's setting;
- ``masks-u2netp``: u2netp masks by the torch backend at its CPU defaults (one image per call, a stream per
  core): a step is one image per stream, from 320² pixels to the 8-bit mask.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bgbias.host_memory import SWITCH, keep_freed_memory, without_allocator_choices  # noqa: E402

WORKLOADS = ("train-bench", "embed-bench", "embed-paper", "train-paper", "masks-u2netp")
VARIANTS = {"bgbias": {}, "glibc's defaults": {SWITCH: "0"}}
"""Each variant's allocator settings, added to an environment without any."""


def step_function(workload: str):
    """The workload's step (called with the step's index), built as bgbias builds it."""
    import torch

    from bgbias.engine.device import resolve_device

    device = resolve_device("cpu")
    if workload.startswith("masks"):
        return _masks_step()
    from scripts.gpu_check import FULL, build, engine_session, loader_batches

    setting = {setting.name: setting for setting in FULL["settings"]}[workload.split("-")[1]]
    method, optimizer, config = build("multi_similarity", setting, device, engine=True)
    session, amp = engine_session(method, optimizer, config, device)
    batches = loader_batches(setting, device)
    if workload.startswith("train"):
        from bgbias.engine.training_data import device_batch

        return lambda index: session.step(device_batch(batches[index % 4], None, [0, index], device), index)
    from bgbias.models.precision import network_precision

    images = [batch["image"].float().div(255) for batch in batches]
    method.eval()

    def embed(index: int) -> None:
        with torch.inference_mode(), network_precision(amp):
            method.embed(images[index % 4])
    return embed


def _masks_step():
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    from bgbias.saliency.sessions import Inference, open_session

    session = open_session("u2netp", Inference(backend="torch", device="cpu"))
    streams = ThreadPoolExecutor(session.info.streams)
    rng = np.random.default_rng(0)
    pixels = [rng.integers(0, 256, (320, 320, 3), dtype=np.uint8) for _ in range(session.info.streams)]
    running = session.running()
    running.__enter__()  # for the child's life: its threads per call
    return lambda index: list(streams.map(lambda image: session.infer([image]), pixels))


def child(workload: str, steps: int) -> None:
    """Time ``workload`` in this process and print one JSON line."""
    import resource

    step = step_function(workload)
    for index in range(2):
        step(index)
    walls, system, faults = [], [], []
    for index in range(2, 2 + steps):
        before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        step(index)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_SELF)
        system.append(after.ru_stime - before.ru_stime)
        faults.append(after.ru_minflt - before.ru_minflt)
    print(json.dumps({"allocator": keep_freed_memory(), "wall": statistics.median(walls),
                      "system": statistics.median(system), "faults": statistics.median(faults),
                      "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def measured(workload: str, variant: str, steps: int) -> dict:
    environment = {**without_allocator_choices(os.environ), **VARIANTS[variant]}
    done = subprocess.run([sys.executable, __file__, "--child", workload, "--steps", str(steps)],
                          env=environment, capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--json", type=Path, help="write the record (docs/data's format) here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps)
        return
    workloads = args.workloads.split(",")
    unknown = sorted(set(workloads) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown workloads {unknown}; choose from {', '.join(WORKLOADS)}")

    results: dict[str, dict[str, list[dict]]] = {w: {v: [] for v in VARIANTS} for w in workloads}
    for round_index in range(args.rounds):
        for workload in workloads:
            order = list(VARIANTS) if round_index % 2 == 0 else list(VARIANTS)[::-1]
            for variant in order:
                found = measured(workload, variant, args.steps)
                results[workload][variant].append(found)
                print(f"  round {round_index + 1}: {workload}, {variant} ({found['allocator']}): "
                      f"{1000 * found['wall']:.0f} ms a step", flush=True)

    rows = []
    for workload, by_variant in results.items():
        median = {variant: {key: statistics.median(run[key] for run in runs)
                            for key in ("wall", "system", "faults", "peak_mib")}
                  for variant, runs in by_variant.items()}
        ours, anchor = median["bgbias"], median["glibc's defaults"]
        rows.append([workload, f"{1000 * anchor['wall']:.0f}", f"{1000 * ours['wall']:.0f}",
                     f"{anchor['wall'] / ours['wall']:.2f}×",
                     f"{1000 * anchor['system']:.0f} → {1000 * ours['system']:.0f}",
                     f"{anchor['faults']:,.0f} → {ours['faults']:,.0f}",
                     f"{anchor['peak_mib']:,.0f} → {ours['peak_mib']:,.0f}"])
    columns = ["workload", "glibc's defaults, ms a step", "bgbias, ms a step", "speed-up",
               "system CPU, ms a step", "minor page faults a step", "peak memory, MiB"]
    import torch

    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
               f"{' '.join(platform.libc_ver())}, Python {platform.python_version()}, "
               f"torch {torch.__version__}")
    note = (f"medians of {args.rounds} rounds, each workload in a fresh process per variant, {args.steps} "
            "steps after 2 warm-up steps; arrows: glibc's defaults → bgbias")
    print(f"\n{machine}; {note}\n\n| {' | '.join(columns)} |\n|{'---|' * len(columns)}")
    for row in rows:
        print(f"| {' | '.join(row)} |")
    if args.json:
        record = {"source": {"command": shlex.join(["python", "benchmarks/host_memory.py", *sys.argv[1:]]),
                             "date": date.today().isoformat(), "machine": machine, "note": note},
                  "tables": {"host_memory": {"columns": columns, "align": ["l", *["r"] * (len(columns) - 1)],
                                             "rows": rows}},
                  "runs": results}
        args.json.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"record written to {args.json}")

if __name__ == "__main__":
    main()
