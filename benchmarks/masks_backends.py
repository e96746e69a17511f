"""The mask backends against each other: how fast each makes masks end to end, where its time goes, and how
close its masks are to onnxruntime's on the CPU (the masks ``bgbias masks`` has always made).

    python benchmarks/masks_backends.py [--model u2netp[,u2net]] [--images DIR | --bench DIR] [-n 40]
                                        [--repeats 3] [--device cpu|cuda] [--configs NAME,...] [--json OUT]
                                        [--random-weights]

Images: ``--images DIR`` takes the first N JPEG/PNG/WEBP files under DIR (sorted by path); ``--bench DIR``
takes N views spread evenly over a built bench (``bgbias assets bench``) and also scores every backend's
masks against the bench's exact ground-truth masks. By default N photos are made once, reproducibly (seed 0):
crops of the photographs among bgbias's background assets (``bgbias assets fetch``: mate_backgrounds,
lomiri_wallpapers; the patterns are left out), resized to a long side of 400–500 px, saved as JPEG quality 90.

Configurations (``--configs``, comma-separated): ``onnxruntime`` (one image per call, float32) and
``torch-bB[-fp32|-bf16|-fp16]`` (bgbias's PyTorch U²-Net, B images per call, autocast as named; bf16 and fp16
on CUDA only). Defaults: on the CPU ``onnxruntime,torch-b1`` with onnxruntime the anchor; on CUDA
``torch-b1`` (one image per call as rembg runs it: the anchor) and ``torch-b8,torch-b32,torch-b64,
torch-b32-bf16,torch-b32-fp16``. Every configuration runs on ``--device`` with the sessions' own defaults
for streams and threads, as ``bgbias masks`` would.

Speed: each configuration's session is opened once, warmed up on a few images, then ``write_masks`` makes
every mask from the files into a fresh folder (decode, 320² shrink, network, stretch back, PNG written); the
configurations run round-robin ``--repeats`` times (other work on the machine disturbs timings) and the table
shows each one's median images/s and its ratio to the anchor of the same run.

Where the time goes, for the anchor and the fastest torch configuration: the same images once more, step by
step on one thread, in ms per image: decode (``load_image``), shrink to 320² (``session.prepare``), network
(``session.infer`` per batch, divided by the batch), stretch back + PNG encode + write (``session.finish`` and
the save). The pipeline overlaps these steps across threads, so its end-to-end time is less than their sum.

Parity: every configuration's masks against onnxruntime float32 on the CPU (made once, untimed): per image the
largest absolute difference of the 8-bit masks and the IoU of their ``>= 128`` foregrounds (both empty: 1),
the mean and the worst over the images.

``--random-weights`` times the torch configurations on the models' architectures with weights drawn at random
(torch seed 0) instead of their files, for a GPU machine the files cannot reach (u2net's is 168 MiB): on a GPU
the same arithmetic at the same speed (on a CPU, random weights can run slower through denormal numbers). Its
masks mean nothing, so the reference run and the parity table are left out.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import date
from importlib.metadata import PackageNotFoundError, version
from io import BytesIO
from pathlib import Path
from unittest import mock

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bgbias.data.images import load_image, load_mask
from bgbias.data.items import Item, make_item, mask_path
from bgbias.data.registry import open_dataset
from bgbias.fileio import write_bytes_atomic
from bgbias.hardware import usable_cores
from bgbias.saliency.pipeline import MaskRun, write_masks
from bgbias.saliency.quality import foreground
from bgbias.saliency.sessions import Inference, MaskSession, open_session

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
PHOTO_LONG_SIDE = (400, 500)
PHOTO_CROP_SIDE = (0.4, 1.0)
"""A default photo is a crop of 40–100 % of each side of a background photograph, then resized."""
WARMUP_IMAGES = 4
"""Images of the warm-up run (at least one whole batch)."""
CPU_CONFIGS = "onnxruntime,torch-b1"
CUDA_CONFIGS = "torch-b1,torch-b8,torch-b32,torch-b64,torch-b32-bf16,torch-b32-fp16"
REFERENCE = "onnxruntime fp32 on the CPU (reference)"
CONFIG_NAME = re.compile(
    r"(?P<backend>onnxruntime|torch)(?:-b(?P<batch>[1-9][0-9]*))?(?:-(?P<amp>fp32|bf16|fp16))?"
)
AMP = {"fp32": "off", "bf16": "bf16", "fp16": "fp16"}


@dataclass(frozen=True)
class Config:
    """One way of running the model: a backend, images per network call and the network's precision."""

    backend: str
    batch: int
    precision: str

    @property
    def name(self) -> str:
        if self.backend == "onnxruntime":
            return "onnxruntime"
        return f"torch-b{self.batch}" + ("" if self.precision == "fp32" else f"-{self.precision}")

    def inference(self, device: str) -> Inference:
        batch = None if self.backend == "onnxruntime" else self.batch
        return Inference(backend=self.backend, device=device, amp=AMP[self.precision], batch=batch)


def parse_configs(text: str, device: str) -> list[Config]:
    """The configurations named in ``text`` (comma-separated), checked against what ``device`` can run."""
    configs = []
    for name in (part.strip() for part in text.split(",")):
        match = CONFIG_NAME.fullmatch(name)
        if match is None:
            raise ValueError(f"unknown configuration {name!r}: use onnxruntime or "
                             "torch-bB[-fp32|-bf16|-fp16], e.g. torch-b32-bf16")
        backend, precision = match["backend"], match["amp"] or "fp32"
        batch = int(match["batch"] or 1)
        if backend == "onnxruntime" and (batch != 1 or precision != "fp32"):
            raise ValueError(f"{name}: onnxruntime runs the model file one image at a time in float32; "
                             "name it plain onnxruntime")
        if precision != "fp32" and device != "cuda":
            raise ValueError(f"{name}: {precision} autocast runs on CUDA only; use --device cuda or fp32")
        config = Config(backend, batch, precision)
        if config in configs:
            raise ValueError(f"{name} is named twice in --configs")
        configs.append(config)
    return configs


def anchor_of(configs: list[Config], device: str) -> Config:
    """The configuration the others are compared with: onnxruntime on the CPU, torch one image per call in
    float32 on CUDA ("rembg's way"), else the first named."""
    wanted = Config("onnxruntime", 1, "fp32") if device == "cpu" else Config("torch", 1, "fp32")
    return wanted if wanted in configs else configs[0]


def max_difference(mask: np.ndarray, reference: np.ndarray) -> int:
    """The largest absolute difference of two 8-bit masks of the same shape."""
    if mask.shape != reference.shape:
        raise ValueError(f"mask shapes differ: {mask.shape} vs {reference.shape}")
    return int(np.max(np.abs(mask.astype(np.int16) - reference.astype(np.int16)), initial=0))


def foreground_iou(mask: np.ndarray, reference: np.ndarray) -> float:
    """IoU of the ``>= 128`` foregrounds of two 8-bit masks of the same shape; 1 when both are empty."""
    if mask.shape != reference.shape:
        raise ValueError(f"mask shapes differ: {mask.shape} vs {reference.shape}")
    ours, theirs = foreground(mask), foreground(reference)
    union = int(np.count_nonzero(ours | theirs))
    return int(np.count_nonzero(ours & theirs)) / union if union else 1.0


@dataclass(frozen=True)
class Parity:
    """How close one configuration's masks are to the reference's, over the same images."""

    mean_max_difference: float
    worst_max_difference: int
    mean_iou: float
    worst_iou: float


def parity(items: list[Item], masks: Path, reference: Path) -> Parity:
    """Each image's mask under ``masks`` against its mask under ``reference``."""
    differences, ious = [], []
    for item in items:
        ours = np.asarray(load_mask(mask_path(item, masks)))
        theirs = np.asarray(load_mask(mask_path(item, reference)))
        differences.append(max_difference(ours, theirs))
        ious.append(foreground_iou(ours, theirs))
    return Parity(statistics.fmean(differences), max(differences), statistics.fmean(ious), min(ious))


@dataclass(frozen=True)
class StepTimes:
    """Milliseconds per image of each step of the pipeline, run one after another on one thread."""

    decode: float
    shrink: float
    network: float
    finish: float

    @property
    def total(self) -> float:
        return self.decode + self.shrink + self.network + self.finish


def step_times(session: MaskSession, items: list[Item], out: Path) -> StepTimes:
    """Each step of making ``items``' masks timed on its own (the network in batches of the session's)."""
    seconds = dict.fromkeys(("decode", "shrink", "network", "finish"), 0.0)
    sizes, prepared = [], []
    for item in items:
        started = time.perf_counter()
        image = load_image(item.image)
        decoded = time.perf_counter()
        prepared.append(session.prepare(image))
        seconds["decode"] += decoded - started
        seconds["shrink"] += time.perf_counter() - decoded
        sizes.append(image.size)
    raws = []
    batch = session.info.batch
    with session.running():
        for start in range(0, len(prepared), batch):
            started = time.perf_counter()
            raws += session.infer(prepared[start:start + batch])  # returns host memory: the device is done
            seconds["network"] += time.perf_counter() - started
    for item, raw, size in zip(items, raws, sizes, strict=True):
        started = time.perf_counter()
        buffer = BytesIO()
        session.finish(raw, size).image.save(buffer, format="PNG")
        write_bytes_atomic(mask_path(item, out), buffer.getvalue())
        seconds["finish"] += time.perf_counter() - started
    return StepTimes(**{step: 1000 * value / len(items) for step, value in seconds.items()})


def default_photos(folder: Path, count: int, seed: int = 0) -> list[Item]:
    """``count`` JPEGs cut from the photographs of bgbias's background assets (the same files for the same
    installed assets and seed)."""
    from bgbias.backgrounds.sources import background_sources

    photos = sorted((s for s in background_sources() if s.kind == "photo"), key=lambda s: s.origin)
    if not photos:
        raise SystemExit("no background photographs are installed: run `bgbias assets fetch`, or pass "
                         "--images DIR or --bench DIR")
    folder.mkdir(parents=True, exist_ok=True)
    for photo_index, photo in enumerate(photos):
        indexes = range(photo_index, count, len(photos))
        if not indexes:
            continue
        source = load_image(photo.path)  # decoded once for all of its crops
        for index in indexes:
            crop = crop_photo(source, np.random.default_rng([seed, index]))
            crop.save(folder / f"{index:04d}.jpg", quality=90)
    return [make_item(folder, f"{index:04d}.jpg", 0) for index in range(count)]


def crop_photo(photo: Image.Image, rng: np.random.Generator) -> Image.Image:
    """A random crop of ``photo`` resized to a long side of 400–500 px."""
    width, height = photo.size
    crop_w, crop_h = (max(1, int(side * rng.uniform(*PHOTO_CROP_SIDE))) for side in (width, height))
    left, top = int(rng.integers(0, width - crop_w + 1)), int(rng.integers(0, height - crop_h + 1))
    crop = photo.crop((left, top, left + crop_w, top + crop_h))
    scale = rng.uniform(*PHOTO_LONG_SIDE) / max(crop.size)
    return crop.resize((max(1, round(crop.width * scale)), max(1, round(crop.height * scale))),
                       Image.Resampling.LANCZOS)


def given_images(folder: Path, count: int) -> list[Item]:
    paths = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if len(paths) < count:
        raise SystemExit(f"{folder} holds {len(paths)} JPEG/PNG/WEBP images, fewer than -n {count}: pass a "
                         "smaller -n or another folder")
    return [make_item(folder, path.relative_to(folder).as_posix(), 0) for path in paths[:count]]


def bench_views(root: Path, count: int) -> list[Item]:
    """``count`` views spread evenly over the bench's index, with their exact ground-truth masks."""
    items = [item for item in open_dataset("bench", root).items() if item.ground_truth_mask is not None]
    if len(items) < count:
        raise SystemExit(f"the bench at {root} has {len(items)} views with ground truth, fewer than -n "
                         f"{count}: pass a smaller -n")
    return [items[index * len(items) // count] for index in range(count)]


def timed_run(
    session: MaskSession, items: list[Item], out: Path, workers: int | None
) -> tuple[float, MaskRun]:
    """Seconds of one whole ``write_masks`` call into ``out`` (a fresh folder)."""
    started = time.perf_counter()
    run = write_masks(items, out, session, workers=workers, progress=False)
    seconds = time.perf_counter() - started
    if run.written != len(items):
        raise SystemExit(f"{session.info.name} on {session.info.backend} wrote {run.written} of {len(items)} "
                         f"masks: {run.describe()}")
    return seconds, run


@dataclass(frozen=True)
class ModelResult:
    """One model's measurements, as the tables show them."""

    throughput: list[list[str]]
    steps: list[list[str]]
    parity: list[list[str]]


def truth_iou(run: MaskRun) -> float | None:
    """The mean IoU of a run's masks with the ground truth (``None`` without ground truth)."""
    return None if run.quality is None or not run.quality.iou.get("n") else float(run.quality.iou["mean"])


def random_weight_sessions(model: str, configs: list[Config], device: str, folder: Path) -> dict:
    """A torch session per configuration on ``model``'s architecture with weights drawn at random: the file
    the sessions open is a placeholder in ``folder``, and the loader hands back a seeded random network."""
    import torch

    from bgbias.saliency.u2net_network import U2Net

    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{model}.onnx").write_text("random weights: benchmarks/masks_backends.py --random-weights\n")

    def random_network(_path, shape, fix):
        torch.manual_seed(0)
        return U2Net(shape)

    with mock.patch.dict("os.environ", {"U2NET_HOME": str(folder)}), \
            mock.patch("bgbias.saliency.sessions.load_u2net", random_network):
        return {config: open_session(model, config.inference(device)) for config in configs}


def measure_model(model: str, items: list[Item], configs: list[Config], device: str, repeats: int,
                  workers: int | None, work: Path, random_weights: bool = False) -> ModelResult:
    """Time, break down and compare every configuration of ``model`` on ``items`` (with random weights:
    time and break down only)."""
    anchor = anchor_of(configs, device)
    sessions = (random_weight_sessions(model, configs, device, work / "random-weights") if random_weights
                else {config: open_session(model, config.inference(device)) for config in configs})
    for config, session in sessions.items():
        info = session.info
        print(f"{model} {config.name}: {info.provider}, batch {info.batch}, {info.streams} streams × "
              f"{info.threads} threads, {info.precision}", flush=True)
        warmup = items[:min(len(items), max(WARMUP_IMAGES, info.batch))]
        timed_run(session, warmup, work / "warmup" / config.name, workers)

    if not random_weights:
        reference_session = (sessions[anchor] if anchor.backend == "onnxruntime" and device == "cpu"
                             else open_session(model, Inference(backend="onnxruntime", device="cpu")))
        _, reference_run = timed_run(reference_session, items, work / "reference", workers)

    seconds: dict[Config, list[float]] = {config: [] for config in configs}
    runs: dict[Config, MaskRun] = {}
    for repeat in range(repeats):
        for config, session in sessions.items():
            out = work / f"round{repeat}" / config.name
            elapsed, run = timed_run(session, items, out, workers)
            seconds[config].append(elapsed)
            runs.setdefault(config, run)
            print(f"  {model} round {repeat + 1}: {config.name}: {len(items) / elapsed:.2f} images/s",
                  flush=True)
        if repeat > 0:
            shutil.rmtree(work / f"round{repeat}")  # round 0's masks stay for the parity

    rate = {config: len(items) / statistics.median(values) for config, values in seconds.items()}
    throughput = [[model, config.name + (" (anchor)" if config == anchor else ""), f"{rate[config]:.2f}",
                   f"{rate[config] / rate[anchor]:.2f}×"] for config in configs]

    torch_configs = [config for config in configs if config.backend == "torch"]
    broken_down = [anchor]
    if torch_configs and (fastest := max(torch_configs, key=rate.__getitem__)) != anchor:
        broken_down.append(fastest)
    steps = []
    for config in broken_down:
        times = step_times(sessions[config], items, work / "steps" / config.name)
        cells = (times.decode, times.shrink, times.network, times.finish, times.total, 1000 / rate[config])
        steps.append([model, config.name, *(f"{value:.1f}" for value in cells)])

    if random_weights:
        return ModelResult(throughput, steps, [])
    reference_truth = truth_iou(reference_run)
    parity_rows = [[model, REFERENCE, "0.00", "0", "1.0000", "1.0000", cell(reference_truth, "{:.3f}"), "—"]]
    for config in configs:
        close = parity(items, work / "round0" / config.name, work / "reference")
        ours = truth_iou(runs[config])
        shift = None if ours is None or reference_truth is None else ours - reference_truth
        parity_rows.append([model, config.name, f"{close.mean_max_difference:.2f}",
                            str(close.worst_max_difference), f"{close.mean_iou:.4f}",
                            f"{close.worst_iou:.4f}", cell(ours, "{:.3f}"), cell(shift, "{:+.4f}")])
    return ModelResult(throughput, steps, parity_rows)


def cell(value: float | None, form: str) -> str:
    return "—" if value is None else form.format(value)


THROUGHPUT_COLUMNS = ["model", "configuration", "images/s", "× anchor"]
STEP_COLUMNS = ["model", "configuration", "decode", "shrink to 320²", "network",
                "stretch back + PNG + write", "sum of the steps", "pipeline end to end"]
PARITY_COLUMNS = ["model", "configuration", "largest Δ, mean", "largest Δ, worst", "IoU ≥ 128, mean",
                  "IoU ≥ 128, worst", "IoU vs ground truth", "Δ IoU vs ground truth"]


def table(columns: list[str], rows: list[list[str]]) -> dict:
    return {"columns": columns, "align": ["l", "l", *["r"] * (len(columns) - 2)], "rows": rows}


def print_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    print(f"\n{title}\n| " + " | ".join(columns) + " |\n|" + "|".join("---" for _ in columns) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def package_version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def machine(device: str) -> str:
    """The machine the run measured, in words."""
    import torch

    words = (f"{platform.processor() or platform.machine()}, {usable_cores()} usable cores, Python "
             f"{platform.python_version()}, torch {torch.__version__}, "
             f"onnxruntime {package_version('onnxruntime')}")
    if device == "cuda":
        words += f", GPU {torch.cuda.get_device_name()}"
    return words


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="u2netp", help="u2netp, u2net, or both comma-separated")
    images = parser.add_mutually_exclusive_group()
    images.add_argument("--images", type=Path, help="folder of JPEG/PNG/WEBP photos (default: crops of the "
                        "background photographs)")
    images.add_argument("--bench", type=Path,
                        help="a built bench: its views, scored against its ground truth")
    parser.add_argument("-n", type=int, default=40, help="number of images")
    parser.add_argument("--repeats", type=int, default=3, help="rounds, each running every configuration")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--configs", help=f"default: {CPU_CONFIGS} on the CPU, {CUDA_CONFIGS} on CUDA")
    parser.add_argument("--workers", type=int, default=None,
                        help="decode/encode threads (default: the pipeline's)")
    parser.add_argument("--json", type=Path, help="write the tables as a docs/data record to this file")
    parser.add_argument("--note", default="", help="added to the record's note")
    parser.add_argument("--random-weights", action="store_true",
                        help="weights drawn at random instead of the model files: speed only (torch only)")
    args = parser.parse_args()
    models = [model.strip() for model in args.model.split(",")]
    if not set(models) <= {"u2netp", "u2net"}:
        parser.error(f"--model takes u2netp and u2net, got {args.model!r}")
    if args.n < 1 or args.repeats < 1:
        parser.error("-n and --repeats must be at least 1")
    try:
        configs = parse_configs(args.configs or (CUDA_CONFIGS if args.device == "cuda" else CPU_CONFIGS),
                                args.device)
    except ValueError as err:
        parser.error(str(err))
    if args.random_weights and any(config.backend != "torch" for config in configs):
        parser.error("--random-weights times the torch backend only: onnxruntime runs the model file")

    results = []
    with tempfile.TemporaryDirectory(prefix="masks-backends-") as tmp_name:
        work = Path(tmp_name)
        if args.bench is not None:
            items, described = bench_views(args.bench, args.n), f"{args.n} bench views"
        elif args.images is not None:
            items, described = given_images(args.images, args.n), f"the first {args.n} images of a folder"
        else:
            items = default_photos(work / "photos", args.n)
            described = f"{args.n} JPEG crops (long side 400–500 px) of the background photographs"
        for model in models:
            results.append(measure_model(model, items, configs, args.device, args.repeats, args.workers,
                                         work / model, args.random_weights))

    throughput = [row for result in results for row in result.throughput]
    steps = [row for result in results for row in result.steps]
    parity_rows = [row for result in results for row in result.parity]
    print(f"\n{described}; {args.repeats} rounds round-robin, median shown; {machine(args.device)}")
    print_table("Images per second (higher is better)", THROUGHPUT_COLUMNS, throughput)
    print_table("Where the time goes, ms per image (steps one after another on one thread)",
                STEP_COLUMNS, steps)
    if parity_rows:
        print_table("Parity with onnxruntime fp32 on the CPU", PARITY_COLUMNS, parity_rows)
    if args.json is not None:
        note = f"{described}; median of {args.repeats} rounds run round-robin"
        if args.random_weights:
            note += "; weights drawn at random (speed only: no parity)"
        record = {
            "source": {
                "command": shlex.join(["python", "benchmarks/masks_backends.py", *sys.argv[1:]]),
                "date": date.today().isoformat(),
                "machine": machine(args.device),
                "note": f"{note}; {args.note}" if args.note else note,
            },
            "tables": {
                "throughput": table(THROUGHPUT_COLUMNS, throughput),
                "steps": table(STEP_COLUMNS, steps),
                **({"parity": table(PARITY_COLUMNS, parity_rows)} if parity_rows else {}),
            },
            # Each configuration's ratio by name, for the pages (a table's row is named by its first cell).
            "values": {f"{row[0]} {row[1]} {THROUGHPUT_COLUMNS[-1]}": row[-1] for row in throughput},
        }
        args.json.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"\nrecord written to {args.json}")


if __name__ == "__main__":
    main()
