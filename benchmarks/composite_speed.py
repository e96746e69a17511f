"""How fast BGAugment's device path is against the paper's code's per-sample PIL path: same inputs, one run.

    python benchmarks/composite_speed.py [--device cpu|cuda] [--backgrounds DIR] [-n 30] [--batch 32]
                                         [--threads T]

Both paths turn one batch of images and soft masks (already float on the device) into the composited batch:

(a) the paper's code's path (docs/design.md, *Compositing and BGAugment*): per image, the decoded PIL
    background (the pool is decoded once, as the paper's code did) is resized to shorter side R, a
    random-resized-crop box is drawn and cut to S × S, the crop is mirrored with p = 0.5 and made a tensor;
    the stacked backgrounds go to the device and are composited with the batch.
(b) ours: ``sample_bgaugment`` on the CPU (from a torch generator), ``BackgroundBank.render`` from the pool
    held on the device (stored at shorter side R), ``apply_bgaugment``.

Sizes: S = 227 with R = 256 (the real benchmarks) and S = 128 with R = 128 (the bench). The two methods run
round-robin, each timed ``-n`` times after two warm-up batches; the table shows medians (other work on the
machine disturbs single timings). Without ``--backgrounds``, 100 synthetic 640-px pictures stand in for a
pool (``./backgrounds/train`` is used when it exists).
"""

from __future__ import annotations

import argparse
import platform
import shlex
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.timing import timed
from bgbias.backgrounds.pool import list_pool
from bgbias.bgaugment.background_bank import BackgroundBank
from bgbias.bgaugment.background_crops import apply_crop, random_resized_box
from bgbias.bgaugment.bgaugment import apply_bgaugment, sample_bgaugment
from bgbias.bgaugment.composite import composite
from bgbias.data.images import load_image
from bgbias.data.transforms import resized_size

GEOMETRIES = ((227, 256), (128, 128))
"""(output side S, background shorter side R)."""


def synthetic_pool(folder: Path, count: int = 100, seed: int = 0) -> Path:
    """``count`` JPEGs, long side 640, smooth colour fields with noise: the size of the default pools."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        width, height = (640, 427) if index % 2 else (480, 640)
        ys, xs = np.mgrid[0:height, 0:width]
        phase = rng.uniform(0, 6.3, 3)
        pixels = np.stack([127 + 100 * np.sin(xs / 50 + ys / 70 + p) for p in phase], axis=-1)
        pixels += rng.normal(0, 12, pixels.shape)
        Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(folder / f"bg-{index:03d}.jpg", quality=90)
    return folder


def paper_path(pool: list[Image.Image], resize: int, size: int, rng: np.random.Generator):
    """A function making one background tensor (3, size, size) on the CPU as the paper's code made it."""
    import torch

    def one(_: int) -> torch.Tensor:
        background = pool[int(rng.integers(len(pool)))]
        resized = background.resize(resized_size(background.size, resize), Image.Resampling.BILINEAR)
        box = random_resized_box(rng, resized.size)
        crop = apply_crop(resized, box, bool(rng.random() < 0.5), size)
        return torch.from_numpy(crop).permute(2, 0, 1).float().div(255)

    return one


def time_runs(runs: dict[str, Callable[[], object]], repeats: int, device) -> dict[str, float]:
    """Median milliseconds of each run, the runs interleaved so that load spikes hit all of them."""
    for run in runs.values():
        timed(run, device)
        timed(run, device)
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            samples[name].append(timed(run, device) * 1000)
    return {name: statistics.median(values) for name, values in samples.items()}


def measure(pool_dir: Path, device, batch: int, size: int, resize: int, repeats: int) -> dict[str, float]:
    import torch

    rng = np.random.default_rng(0)
    generator = torch.Generator().manual_seed(0)
    images = torch.rand((batch, 3, size, size), generator=generator).to(device)
    masks = torch.rand((batch, 1, size, size), generator=generator).to(device)
    pool = [load_image(path) for path in list_pool(pool_dir)]
    bank = BackgroundBank.from_folder(pool_dir, device, shorter_side=resize)
    make_one = paper_path(pool, resize, size, rng)
    draws = torch.Generator().manual_seed(0)

    def paper_run() -> torch.Tensor:
        backgrounds = torch.stack([make_one(i) for i in range(batch)]).to(device)
        return composite(images, masks, backgrounds)

    def bank_run() -> torch.Tensor:
        params = sample_bgaugment(bank.sizes, batch, 1.0, draws)
        backgrounds = bank.render(params.crops, size)
        apply = torch.tensor(params.apply).to(device)
        return apply_bgaugment(images, masks, backgrounds, apply)

    return time_runs({"paper": paper_run, "bank": bank_run}, repeats, device)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--backgrounds", type=Path, help="a pool folder (default: ./backgrounds/train or synthetic)"
    )
    parser.add_argument("-n", "--repeats", type=int, default=30, help="timed batches per method and size")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's choice)")
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    with tempfile.TemporaryDirectory() as scratch:
        pool_dir = args.backgrounds
        if pool_dir is None:
            default = Path("backgrounds/train")
            pool_dir = default if default.is_dir() else synthetic_pool(Path(scratch) / "pool")
        rows = [
            (size, resize, measure(pool_dir, device, args.batch, size, resize, args.repeats))
            for size, resize in GEOMETRIES
        ]
        pool_size = len(list_pool(pool_dir))

    print(f"command: python {shlex.join(sys.argv)}")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "CPU"
    print(
        f"device: {device} ({name}), torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"batch {args.batch}, pool {pool_dir} ({pool_size} images), median of {args.repeats}"
    )
    print()
    print(
        "| output | backgrounds | paper's code: per-sample PIL (ms/batch) "
        "| bank.render + apply_bgaugment (ms/batch) | speed-up |"
    )
    print("|---|---|---|---|---|")
    for size, resize, times in rows:
        print(
            f"| {size}×{size} | shorter side {resize} | {times['paper']:.1f} | {times['bank']:.1f} | "
            f"{times['paper'] / times['bank']:.1f}× |"
        )


if __name__ == "__main__":
    main()
