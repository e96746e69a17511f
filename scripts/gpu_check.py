"""The one device check: how bgbias uses a machine's accelerator, against bare PyTorch floors, in one run.

    python scripts/gpu_check.py [--device cuda|cpu] [--small] [--sections NAME,...] [--record FILE]

Run it first whenever a GPU machine is available (at most 8 minutes on one GPU); ``--device cpu --small``
runs the same code on a 2-core CPU in a few minutes with tiny settings (the test suite runs it, so it cannot
rot between GPU runs). Sections (``--sections``, comma-separated; default all):

- ``tests``: the CUDA-marked tests (``pytest -m cuda``), their counts; with ``--small``, from the test files
  that name the marker (``mark.cuda``) only, so that the suite is not collected whole on a CPU;
- ``training``: every bundled method's training step at the bench's setting (MobileNetV2, 128 px) and the
  paper's (BN-Inception, 227 px, the protocol's batch of 32), as images/s through bgbias's engine (its step,
  the finite-loss watch, its precision and memory-format defaults on this device, uint8 images made floats as
  the loader hands them over) and through a **bare loop** (the same method module in float32, contiguous:
  ``loss.backward()``, ``optimizer.step()``, images already float on the device), and with BGAugment
  compositing every batch on the device; random weights and images (speed does not depend on them);
- ``embedding``: the eval-mode embedding under bgbias's defaults against the bare forward in float32;
- ``masks``: U²-Netp masks from JPEG files to PNG masks, bgbias's default backend and batch on this device
  against the torch network one image per call in float32 (rembg's way); needs ``$U2NET_HOME/u2netp.onnx``
  or ``bgbias assets fetch u2netp``;
- ``scoring``: exact MAP@R, R-precision and P@1 of 250,000 and 1,000,000 random embeddings against a bare
  ``torch.mm`` + ``topk`` search of the same neighbours (``benchmarks/scoring_scale.py``'s floor);
- ``study``: the quick preset end to end in a fresh folder, after the dry run's estimate of it (not with
  ``--small``: minutes on a CPU).

Timed contenders alternate in ABBA order, two warm-up rounds excluded; the medians are shown with the ratio
to the floor. A section that fails is recorded with its error and the check goes on. ``--record FILE`` writes
one JSON record (device, driver, versions, every table) in the format of ``docs/data/`` (docs/benchmarks.md,
*The device check*).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks.timing import timed  # noqa: E402

SECTIONS = ("tests", "training", "embedding", "masks", "scoring", "study")
CLASSES = 100


@dataclass(frozen=True)
class Setting:
    """A training setting of the check: the protocol of ``dataset`` on ``backbone`` at ``size`` px."""

    name: str
    dataset: str
    backbone: str
    size: int
    batch: int


FULL = {"settings": (Setting("bench", "bench", "mobilenet_v2", 128, 32),
                     Setting("paper", "cub", "bninception", 227, 32)),
        "steps": 10, "scoring": (250_000, 1_000_000), "masks": 400}
SMALL = {"settings": (Setting("bench", "bench", "tiny_cnn", 32, 8),
                      Setting("paper", "cub", "tiny_cnn", 40, 8)),
         "steps": 1, "scoring": (4_000,), "masks": 4}


def alternate(calls: dict[str, Callable[[int], object]], n: int, device: torch.device) -> dict[str, float]:
    """Median seconds of each call, run in ABBA order ``n`` times after two warm-up rounds."""
    names = list(calls)
    times: dict[str, list[float]] = {name: [] for name in names}
    for index in range(n + 2):
        for name in names if index % 2 == 0 else names[::-1]:
            seconds = timed(lambda name=name, index=index: calls[name](index), device)
            if index >= 2:
                times[name].append(seconds)
    return {name: statistics.median(values) for name, values in times.items()}


def build(method_name: str, setting: Setting, device: torch.device, engine: bool):
    """The method on a random-weight backbone with the setting's protocol, and its optimizer: with
    bgbias's memory format (``engine``) or contiguous (the bare loop)."""
    from bgbias.engine.config import resolve_config
    from bgbias.engine.device import memory_format
    from bgbias.engine.training_build import build_optimizer
    from bgbias.methods.base import MethodSpec
    from bgbias.methods.registry import method_class
    from bgbias.models.registry import build_backbone

    config = resolve_config(method_name, setting.dataset, overrides=[
        f"model.backbone={setting.backbone}", "model.pretrained=false", f"data.batch_size={setting.batch}",
        "data.m_per_class=4"])
    torch.manual_seed(0)
    backbone = build_backbone(setting.backbone, pretrained=False,
                              freeze_batchnorm=config.model.freeze_batchnorm)
    spec = MethodSpec(config.model.embedding_dim, CLASSES, 40 * setting.batch, pooling=config.model.pooling,
                      options=dict(config.loss), input_size=setting.size)
    method = method_class(method_name)(backbone, spec)
    method.set_memory_format(memory_format(config.model.memory_format if engine else "contiguous"))
    method = method.to(device).train()
    return method, build_optimizer(config, method), config


def loader_batches(setting: Setting, device: torch.device, count: int = 4) -> list[dict[str, torch.Tensor]]:
    """Batches as the loader hands them over (uint8 images, masks, labels, indices), already on the device."""
    batches = []
    for seed in range(count):
        generator = torch.Generator().manual_seed(seed)
        shape = (setting.batch, 3, setting.size, setting.size)
        images = torch.randint(0, 256, shape, dtype=torch.uint8, generator=generator)
        yy, xx = torch.meshgrid(torch.arange(setting.size), torch.arange(setting.size), indexing="ij")
        blob = ((yy - setting.size / 2) ** 2 + (xx - setting.size / 2) ** 2) < (setting.size / 3) ** 2
        masks = (blob * 255).to(torch.uint8).expand(setting.batch, 1, -1, -1).contiguous()
        labels = (torch.arange(setting.batch // 4).repeat_interleave(4) + seed * 7) % CLASSES
        indices = torch.arange(setting.batch) + seed * setting.batch
        batches.append({"image": images.to(device), "mask": masks.to(device), "label": labels.to(device),
                        "index": indices.to(device)})
    return batches


def background_augment(size: int, device: torch.device):
    """BGAugment over 16 random backgrounds, on the device."""
    from bgbias.bgaugment.background_bank import BackgroundBank
    from bgbias.bgaugment.bgaugment import BGAugment

    side = 2 * size
    pixels = torch.randint(0, 256, (16, 3, side, side), dtype=torch.uint8, generator=torch.Generator())
    bank = BackgroundBank(pixels, [(side, side)] * 16, [f"random-{i}" for i in range(16)])
    return BGAugment(bank, seed=0).to(device)


def engine_session(method, optimizer, config, device: torch.device):
    """bgbias's training step (:meth:`TrainingSession.step`) on ``method``, without a run folder."""
    from bgbias.engine.device import resolve_amp
    from bgbias.engine.training_loop import TrainingSession
    from bgbias.engine.training_records import TrainingState

    amp = resolve_amp(config.amp, device)
    scaler = torch.amp.GradScaler(device.type, enabled=amp == torch.float16)
    state = TrainingState(epoch=config.optim.warmup_epochs + 1)  # past the warm-up: every group steps
    return TrainingSession(config, None, SimpleNamespace(method=method), device, amp, None, False, None,
                           method, optimizer, scaler, None, None, state), amp


def training(scale: dict, device: torch.device, methods: list[str]) -> dict[str, Any]:
    from bgbias.engine.training_data import device_batch
    from bgbias.methods.base import Batch

    rows = []
    for setting in scale["settings"]:
        batches = loader_batches(setting, device)
        floats = [Batch(b["image"].float().div(255), b["label"], b["index"]) for b in batches]
        augment = background_augment(setting.size, device)
        for name in methods:
            method, optimizer, config = build(name, setting, device, engine=True)
            session, amp = engine_session(method, optimizer, config, device)
            bare, bare_optimizer, _ = build(name, setting, device, engine=False)

            def engine_step(index, with_bgaugment=False, session=session, batches=batches, augment=augment):
                batch = device_batch(batches[index % 4], augment if with_bgaugment else None, [0, index],
                                     device)
                session.step(batch, index)

            def bare_step(index, method=bare, optimizer=bare_optimizer, floats=floats):
                loss = method.loss(floats[index % 4])["loss"]
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()

            median = alternate({"bare": bare_step, "bgbias": engine_step,
                                "bgbias + BGAugment": lambda i, step=engine_step: step(i, True)},
                               scale["steps"], device)
            rate = {key: setting.batch / seconds for key, seconds in median.items()}
            rows.append([setting.name, name, f"{rate['bare']:.1f}", f"{rate['bgbias']:.1f}",
                         f"{rate['bgbias'] / rate['bare']:.2f}×", f"{rate['bgbias + BGAugment']:.1f}",
                         f"{100 * (median['bgbias + BGAugment'] / median['bgbias'] - 1):+.1f} %",
                         _precision(amp, config.model.memory_format)])
            print(f"  training {setting.name} {name}: bare {rate['bare']:.1f}, bgbias {rate['bgbias']:.1f}, "
                  f"+BGAugment {rate['bgbias + BGAugment']:.1f} images/s", flush=True)
    return {"columns": ["setting", "method", "bare loop, images/s", "bgbias, images/s", "bgbias / bare",
                        "bgbias + BGAugment, images/s", "BGAugment's cost", "bgbias's precision, layout"],
            "rows": rows}


def embedding(scale: dict, device: torch.device) -> dict[str, Any]:
    from bgbias.models.precision import network_precision

    rows = []
    for setting in scale["settings"]:
        method, _, config = build("multi_similarity", setting, device, engine=True)
        _, amp = engine_session(method, None, config, device)
        bare, _, _ = build("multi_similarity", setting, device, engine=False)
        images = [b["image"].float().div(255) for b in loader_batches(setting, device)]
        method.eval()
        bare.eval()

        def ours(index, method=method, images=images, amp=amp):
            with torch.inference_mode(), network_precision(amp):
                method.embed(images[index % 4])

        def floor(index, bare=bare, images=images):
            with torch.inference_mode():
                bare.embed(images[index % 4])

        median = alternate({"bare": floor, "bgbias": ours}, scale["steps"], device)
        rows.append([setting.name, f"{setting.batch / median['bare']:.1f}",
                     f"{setting.batch / median['bgbias']:.1f}", f"{median['bare'] / median['bgbias']:.2f}×",
                     _precision(amp, config.model.memory_format)])
    return {"columns": ["setting", "bare forward, images/s", "bgbias, images/s", "bgbias / bare",
                        "bgbias's precision, layout"], "rows": rows}


def masks(scale: dict, device: torch.device) -> dict[str, Any]:
    import numpy as np
    from PIL import Image

    from bgbias.data.items import make_item
    from bgbias.saliency.pipeline import write_masks
    from bgbias.saliency.sessions import Inference, open_session

    count = scale["masks"]
    with tempfile.TemporaryDirectory(prefix="gpu-check-masks-") as tmp:
        folder = Path(tmp) / "photos"
        folder.mkdir()
        rng = np.random.default_rng(0)
        for index in range(count):  # smooth random scenes, 480×360 JPEGs
            small = rng.integers(0, 256, (9, 12, 3), dtype=np.uint8)
            Image.fromarray(small).resize((480, 360), Image.Resampling.BICUBIC).save(
                folder / f"{index:04d}.jpg", quality=90)
        items = [make_item(folder, f"{index:04d}.jpg", 0) for index in range(count)]
        kind = "cuda" if device.type == "cuda" else "cpu"
        sessions = {"one image per call, torch float32": open_session(
                        "u2netp", Inference(backend="torch", device=kind, amp="off", batch=1)),
                    "bgbias's default": open_session("u2netp", Inference(device=kind))}
        rates = {}
        for name, session in sessions.items():
            write_masks(items[:max(4, session.info.batch)], Path(tmp) / f"warm-{len(rates)}", session,
                        progress=False)
            out = Path(tmp) / f"out-{len(rates)}"
            started = time.perf_counter()
            write_masks(items, out, session, progress=False)
            rates[name] = count / (time.perf_counter() - started)
        default = sessions["bgbias's default"].info
        anchor = rates["one image per call, torch float32"]
        rows = [[name, f"{rate:.1f}", f"{rate / anchor:.2f}×"] for name, rate in rates.items()]
        rows[-1][0] += f" ({default.backend}, batch {default.batch}, {default.precision})"
    return {"columns": ["u2netp masks, files to PNG", "images/s", "× one image per call"], "rows": rows}


def scoring(scale: dict, device: torch.device) -> dict[str, Any]:
    from benchmarks.scoring_scale import data, floor_torch, needs
    from bgbias.retrieval.metrics import MAX_MEMORY, score_embeddings
    from bgbias.retrieval.retrievers import ExactL2

    rows, exact = [], ExactL2(backend="torch")
    for images in scale["scoring"]:
        embeddings, labels = data(images, 128, max(2, images // 25), 0)
        on_device = torch.as_tensor(embeddings).to(device)
        need = needs(labels)
        median = alternate({  # the floor copies the host array to the device itself, each time
            "floor": lambda _i, e=embeddings, n=need: floor_torch(e, n, MAX_MEMORY, device),
            "bgbias": lambda _i, e=on_device, y=labels: score_embeddings(e, y, retrieval=exact),
        }, 1, device)
        rows.append([f"{images:,}", f"{median['floor']:.2f}", f"{median['bgbias']:.2f}",
                     f"{median['bgbias'] / median['floor']:.2f}×"])
    return {"columns": ["images (128-d, 25 per class)", "floor: mm + topk, s", "bgbias, s", "bgbias / floor"],
            "rows": rows}


def study(device: torch.device) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gpu-check-study-") as tmp:
        command = [sys.executable, "-m", "bgbias", "study", "--out", str(Path(tmp) / "study"),
                   "--devices", "cpu" if device.type == "cpu" else "auto"]
        estimate = subprocess.run([*command, "--dry-run"], capture_output=True, text=True, check=True,
                                  cwd=tmp).stdout
        total = next(line for line in estimate.splitlines() if line.startswith("total"))
        hours = float(re.search(r"([0-9.]+) h", total).group(1))
        started = time.perf_counter()
        subprocess.run(command, capture_output=True, text=True, check=True, cwd=tmp)
        took = time.perf_counter() - started
    return {"columns": ["the quick preset", "dry run's estimate, min", "took, min", "estimate / took"],
            "rows": [["bench, multi-similarity with and without BGAugment", f"{60 * hours:.1f}",
                      f"{took / 60:.1f}", f"{3600 * hours / took:.2f}×"]]}


def tests(device: torch.device, small: bool) -> dict[str, Any]:
    where = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "tests").rglob("test_*.py")
                   if "mark.cuda" in path.read_text(encoding="utf-8")) if small else ["tests"]
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "cuda",
                           "-n", "0", *where], capture_output=True, text=True, cwd=ROOT)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr.strip()[-300:]
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED")]
    rows = [["pytest -m cuda", summary], *[["failed", line.removeprefix("FAILED ")] for line in failed]]
    return {"columns": ["CUDA-marked tests", "summary"], "rows": rows}


def _precision(amp, layout: str) -> str:
    from bgbias.engine.device import precision_name

    return f"{precision_name(amp)}, {layout}"


def machine(device: torch.device) -> dict[str, str]:
    """What ran the check, in words and versions."""
    from bgbias.hardware import usable_cores
    from bgbias.host_memory import keep_freed_memory

    found = {"python": platform.python_version(), "torch": torch.__version__, "cores": str(usable_cores()),
             "processor": platform.processor() or platform.machine(), "host_memory": keep_freed_memory()}
    if device.type == "cuda":
        found |= {"gpu": torch.cuda.get_device_name(device), "cuda": str(torch.version.cuda),
                  "cudnn": str(torch.backends.cudnn.version())}
        try:
            found["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            found["driver"] = "unknown (nvidia-smi did not answer)"
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--small", action="store_true", help="tiny settings: minutes on a 2-core CPU")
    parser.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated, of: " +
                        ", ".join(SECTIONS))
    parser.add_argument("--methods", default="all", help="all, or comma-separated method names")
    parser.add_argument("--record", type=Path, help="write the JSON record here")
    args = parser.parse_args(argv)
    from bgbias.methods.registry import method_names

    sections = [name.strip() for name in args.sections.split(",")]
    if unknown := sorted(set(sections) - set(SECTIONS)):
        parser.error(f"unknown sections {unknown}: choose from {', '.join(SECTIONS)}")
    methods = method_names() if args.methods == "all" else [m.strip() for m in args.methods.split(",")]
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device cuda, but this torch ({torch.__version__}) sees no CUDA device")
    if args.small and "study" in sections and args.sections == ",".join(SECTIONS):
        sections.remove("study")  # minutes of training: not part of the small check
    device = torch.device(args.device)
    scale = SMALL if args.small else FULL
    runs = {"tests": lambda: tests(device, args.small), "training": lambda: training(scale, device, methods),
            "embedding": lambda: embedding(scale, device), "masks": lambda: masks(scale, device),
            "scoring": lambda: scoring(scale, device), "study": lambda: study(device)}
    tables, failures = {}, {}
    for name in sections:
        print(f"== {name}", flush=True)
        started = time.perf_counter()
        try:
            tables[name] = runs[name]()
        except Exception as error:  # recorded, and the check goes on
            failures[name] = f"{type(error).__name__}: {error}"
            traceback.print_exc()
        print(f"   {name}: {time.perf_counter() - started:.0f} s", flush=True)
        if name in tables:
            table = tables[name]
            print("   | " + " | ".join(table["columns"]) + " |")
            for row in table["rows"]:
                print("   | " + " | ".join(row) + " |")
    found = machine(device)
    if args.record is not None:
        command = shlex.join(["python", "scripts/gpu_check.py", *(argv or sys.argv[1:])])
        record = {"source": {"command": command,
                             "date": date.today().isoformat(),
                             "machine": ", ".join(f"{key} {value}" for key, value in found.items())},
                  "machine": found, "tables": tables, "failures": failures}
        args.record.parent.mkdir(parents=True, exist_ok=True)
        args.record.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"record written to {args.record}")
    for name, error in failures.items():
        print(f"section {name} failed: {error}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
