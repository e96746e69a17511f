"""How fast ``bgbias masks`` is against the ways rembg itself makes the same masks: same images, one run.

    python benchmarks/masks_speed.py --model u2netp [--images DIR] [-n 40] [--repeats 3]
                                     [--streams S] [--threads T] [--workers W]

Methods, each making 8-bit masks for the same N files (read file → mask → PNG on disk, except the raw run):

1. rembg's own loop: ``rembg.remove(file bytes, session=s, only_mask=True)`` per file, one session with
   rembg's default options, PNG written.
2. ``rembg p -om -m MODEL IN OUT`` (the paper's code's command), as a subprocess; its start-up (interpreter,
   imports, session) is timed on an empty folder and reported beside it. Skipped when rembg's CLI extra is
   missing.
3. raw ``session.run`` on inputs prepared beforehand, one image after another with rembg's default session
   options ("the raw rate", the reference of the ratios), and with bgbias's session: ``streams`` runs at once
   of ``threads`` intra-op threads each (the ceiling of the pipeline's configuration).
4. bgbias's pipeline (``write_masks``) with that bgbias session, into a fresh folder.

Other work on the machine disturbs timings, so the methods run round-robin ``--repeats`` times and the table
shows each method's median. The model is found like ``bgbias masks`` finds it (``$U2NET_HOME``,
``$BGBIAS_HOME/u2net``, ``~/.u2net``). Without ``--images``, N photos are cut from scikit-image's samples.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bgbias.assets.store import u2net_model_path
from bgbias.data.images import load_image
from bgbias.data.items import Item, make_item, mask_path
from bgbias.saliency.pipeline import write_masks
from bgbias.saliency.sessions import Inference, open_session, rembg_onnx_session
from bgbias.saliency.u2net import u2net_input

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
SAMPLE_PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry", "hubble_deep_field")


def sample_images(folder: Path, count: int, seed: int = 0) -> list[Path]:
    """``count`` JPEGs (long side 300–500 px) cut at random from scikit-image's sample photos."""
    import skimage.data

    rng = np.random.default_rng(seed)
    photos = [Image.fromarray(getattr(skimage.data, name)()).convert("RGB") for name in SAMPLE_PHOTOS]
    paths = []
    for index in range(count):
        photo = photos[index % len(photos)]
        width, height = photo.size
        crop_w, crop_h = (int(side * rng.uniform(0.6, 1.0)) for side in (width, height))
        left, top = int(rng.integers(0, width - crop_w + 1)), int(rng.integers(0, height - crop_h + 1))
        image = photo.crop((left, top, left + crop_w, top + crop_h))
        scale = rng.uniform(300, 500) / max(image.size)
        image = image.resize(
            (round(image.width * scale), round(image.height * scale)), Image.Resampling.BICUBIC
        )
        if rng.random() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        path = folder / f"{index:04d}.jpg"
        image.save(path, quality=90)
        paths.append(path)
    return paths


def given_images(folder: Path, count: int) -> list[Path]:
    paths = sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    if len(paths) < count:
        raise SystemExit(f"{folder} holds {len(paths)} images, fewer than -n {count}")
    return paths[:count]


def flat_copy(paths: list[Path], folder: Path) -> list[Item]:
    """The files copied flat into ``folder`` (``rembg p`` writes flat output) and as bgbias items."""
    folder.mkdir(parents=True)
    items = []
    for index, path in enumerate(paths):
        name = f"{index:04d}{path.suffix.lower()}"
        shutil.copyfile(path, folder / name)
        items.append(make_item(folder, name, 0))
    return items


def rembg_session(model: str, model_file: Path):
    """A session as rembg users make it: ``new_session(model)``, default options (model via U2NET_HOME)."""
    import rembg

    os.environ["U2NET_HOME"] = str(model_file.parent)
    return rembg.new_session(model, providers=["CPUExecutionProvider"])


def time_rembg_loop(session, items: list[Item], out: Path) -> float:
    import rembg

    out.mkdir(parents=True)
    started = time.perf_counter()
    for item in items:
        data = rembg.remove(item.image.read_bytes(), session=session, only_mask=True)
        (out / item.relpath.with_suffix(".png").name).write_bytes(data)
    return time.perf_counter() - started


def cli_available() -> bool:
    probe = [sys.executable, "-c", "import rembg.commands.p_command"]
    return subprocess.run(probe, capture_output=True).returncode == 0


def time_rembg_cli(model: str, model_file: Path, source: Path, out: Path) -> float:
    env = dict(os.environ, U2NET_HOME=str(model_file.parent))
    command = [
        sys.executable,
        "-c",
        "from rembg.cli import main; main()",
        "p",
        "-om",
        "-m",
        model,
        str(source),
    ]
    started = time.perf_counter()
    subprocess.run([*command, str(out)], check=True, env=env, capture_output=True)
    return time.perf_counter() - started


def time_raw(run_once: Callable[[np.ndarray], object], inputs: list[np.ndarray], streams: int = 1) -> float:
    """Seconds for running every input, ``streams`` at a time."""
    started = time.perf_counter()
    if streams == 1:
        for tensor in inputs:
            run_once(tensor)
    else:
        with ThreadPoolExecutor(streams) as pool:
            list(pool.map(run_once, inputs))
    return time.perf_counter() - started


def time_pipeline(session, items: list[Item], out: Path, workers: int | None) -> float:
    started = time.perf_counter()
    run = write_masks(items, out, session, workers=workers, progress=False)
    elapsed = time.perf_counter() - started
    if run.written != len(items):
        raise SystemExit(f"pipeline wrote {run.written} of {len(items)} masks")
    return elapsed


def count_identical(items: list[Item], ours: Path, theirs: Path) -> int:
    same = 0
    for item in items:
        a = np.asarray(Image.open(mask_path(item, ours)))
        b = np.asarray(Image.open(theirs / item.relpath.with_suffix(".png").name))
        same += int(np.array_equal(a, b))
    return same


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="u2netp")
    parser.add_argument("--images", type=Path, help="folder of photos (default: cut from scikit-image's)")
    parser.add_argument("-n", type=int, default=40, help="number of images")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--streams", type=int, default=None, help="bgbias: images in the network at once")
    parser.add_argument("--threads", type=int, default=None, help="bgbias: intra-op threads per stream")
    parser.add_argument("--workers", type=int, default=None, help="bgbias: decode/encode threads")
    args = parser.parse_args()

    import onnxruntime as ort

    model_file = u2net_model_path(args.model)
    with tempfile.TemporaryDirectory(prefix="masks-speed-") as tmp_name:
        tmp = Path(tmp_name)
        if args.images is None:
            (tmp / "sample").mkdir()
            originals = sample_images(tmp / "sample", args.n)
        else:
            originals = given_images(args.images, args.n)
        items = flat_copy(originals, tmp / "in")
        sizes = [load_image(item.image).size for item in items]

        ours = open_session(args.model, Inference(backend="onnxruntime", device="cpu", streams=args.streams,
                                                  threads=args.threads))
        theirs = rembg_session(args.model, model_file)
        inputs = [u2net_input(load_image(item.image)) for item in items]
        theirs_network = rembg_onnx_session(theirs)
        feed = theirs_network.get_inputs()[0].name
        first_output = theirs_network.get_outputs()[0].name

        def raw_theirs(x: np.ndarray) -> object:
            return theirs_network.run([first_output], {feed: x})

        def raw_ours(x: np.ndarray) -> object:
            return ours.infer([x])  # the same call the pipeline makes, on a batch of one


        raw_theirs(inputs[0])
        raw_ours(inputs[0])
        with_cli = cli_available()
        times: dict[str, list[float]] = {}
        startup: list[float] = []
        (tmp / "empty").mkdir()
        for repeat in range(args.repeats):
            run_dir = tmp / f"run{repeat}"
            methods: dict[str, Callable[[], float]] = {
                "rembg.remove loop": lambda d=run_dir: time_rembg_loop(theirs, items, d / "loop"),
                "raw session.run (rembg options)": lambda: time_raw(raw_theirs, inputs),
                "raw session.run (bgbias options)": lambda: time_raw(raw_ours, inputs, ours.info.streams),
                "bgbias pipeline": lambda d=run_dir: time_pipeline(ours, items, d / "ours", args.workers),
            }
            if with_cli:
                methods["rembg p -om (CLI)"] = lambda d=run_dir: time_rembg_cli(
                    args.model, model_file, tmp / "in", d / "cli"
                )
            for name, method in methods.items():
                times.setdefault(name, []).append(method())
                print(
                    f"  round {repeat + 1}: {name}: {len(items) / times[name][-1]:.2f} images/s", flush=True
                )
            if with_cli:
                startup.append(time_rembg_cli(args.model, model_file, tmp / "empty", run_dir / "cli-empty"))
        identical = count_identical(items, tmp / "run0" / "ours", tmp / "run0" / "loop")

        rate = {name: len(items) / statistics.median(values) for name, values in times.items()}
        raw = rate["raw session.run (rembg options)"]
        loop = rate["rembg.remove loop"]
        print()
        print(
            f"model {args.model} ({model_file.stat().st_size / 1e6:.1f} MB), {len(items)} images, "
            f"{min(w * h for w, h in sizes) ** 0.5:.0f}–{max(w * h for w, h in sizes) ** 0.5:.0f} px "
            f"(geometric side), {args.repeats} rounds, median shown"
        )
        print(
            f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
            f"onnxruntime {ort.__version__}; bgbias: {ours.info.streams} streams × {ours.info.threads} "
            f"intra-op threads, {args.workers or 'default'} workers"
        )
        print(f"bgbias masks identical to rembg.remove: {identical}/{len(items)}")
        print()
        print(f"| {'method':34s} | images/s | × raw run | × rembg loop |")
        print(f"|{'-' * 36}|---------:|----------:|-------------:|")
        order = [
            "rembg.remove loop",
            "rembg p -om (CLI)",
            "raw session.run (rembg options)",
            "raw session.run (bgbias options)",
            "bgbias pipeline",
        ]
        for name in order:
            if name in rate:
                cells = f"{rate[name]:8.2f} | {rate[name] / raw:9.2f} | {rate[name] / loop:12.2f}"
                print(f"| {name:34s} | {cells} |")
        if with_cli:
            fixed = statistics.median(startup)
            work = statistics.median(times["rembg p -om (CLI)"]) - fixed
            print(
                f"\nrembg p start-up on an empty folder: {fixed:.1f} s; without it the CLI makes "
                f"{len(items) / work:.2f} images/s"
            )
        else:
            print("\nrembg p skipped: rembg's CLI extra is not installed (pip install 'rembg[cli]')")


if __name__ == "__main__":
    main()
