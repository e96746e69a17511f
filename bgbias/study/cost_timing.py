"""Timing one training configuration on the target device, for the dry run's cost (:mod:`~bgbias.study.cost`):
a few steps of each kind of work through the engine's own code, on a small bench-layout stand-in of the
dataset in a temporary folder.

The stand-in needs neither the dataset, its masks, its pools nor pretrained weights to exist yet (a dry run
may come before all of them; random weights cost the same steps), and keeps everything that sets a step's
cost (backbone, batch size, method, precision, layout, BGAugment, the dataset's geometry).
"""

from __future__ import annotations

import csv
import dataclasses
import gc
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageDraw
from tqdm import tqdm

from bgbias.attribution.run import explain
from bgbias.corrupted.corrupted_images import CorruptedImages
from bgbias.corrupted.manifests import load_manifest, make_corrupted_manifests
from bgbias.data.eval_images import EvalImages
from bgbias.data.geometry import EvalGeometry
from bgbias.data.images import load_image
from bgbias.data.registry import dataset_class, open_dataset
from bgbias.data.splits import split_items
from bgbias.engine import distributed
from bgbias.engine.config import TrainConfig
from bgbias.engine.device import resolve_amp, resolve_device
from bgbias.engine.embedding import embed_images
from bgbias.engine.method_model import MethodModel
from bgbias.engine.run_dir import RunDir
from bgbias.engine.split_states import EVAL_BATCH_SIZE
from bgbias.engine.training_build import prepare_inputs
from bgbias.engine.training_data import train_geometry_of
from bgbias.engine.training_loop import TrainingSession
from bgbias.fileio import make_dirs
from bgbias.measurement.request import MeasureRequest
from bgbias.methods.embedding_model import TrainedOn
from bgbias.report.evaluate import evaluate
from bgbias.saliency.ground_truth import copy_ground_truth_masks

TRAIN_STEPS = 3
"""Timed loader batches of training (after an epoch of as many to warm up: first allocations, workers)."""

EMBED_IMAGES = 64
"""Images of the stand-in's validation split: embedded clean and corrupted to time one image of each."""

EXPLAINED_IMAGES = 3
"""Images the timed ``explain`` scores, after one attributed image that warms the attribution up."""

STAND_IN_BATCHES = 4
"""The stand-in's training split holds this many batches' images: enough for the largest batch a method
draws besides the loader's (DCML's environment batches are twice the loader's on the bench)."""

STAND_IN_POOL = 6
"""Pictures in each synthetic pool (train and test) when the study has none yet."""


@dataclass(frozen=True)
class MeasureTiming:
    """What measuring a trained model adds to its embedding passes, in seconds (one evaluation's overhead, one
    image of each attribution, what the ``explain`` calls add); a configuration's twin without BGAugment
    shares it."""

    evaluation_overhead: float
    attribution_images: tuple[float, ...]
    explain_overhead: float


@dataclass(frozen=True)
class ConfigTiming:
    """Seconds of the units a run's work is made of, measured for one configuration on one device: building
    the run (``setup``), one loader batch's optimiser steps, what an epoch adds (``epoch_overhead``), the
    method's epoch-start hooks per training image, embedding one clean or corrupted image, and ``measure``."""

    setup: float
    train_batch: float
    epoch_overhead: float
    epoch_start: float
    clean_image: float
    corrupted_image: float
    measure: MeasureTiming


@dataclass
class StandInModel(MethodModel):
    """A method on the stand-in, measured at the evaluation ``geometry`` of the dataset it stands in for
    (the :class:`~bgbias.methods.embedding_model.OwnGeometry` capability)."""

    geometry: EvalGeometry | None = None

    def eval_geometry(self, dataset_name: str) -> EvalGeometry:
        assert self.geometry is not None
        return self.geometry


@dataclass(frozen=True)
class StandIn:
    """A stand-in dataset in a temporary folder: the bench layout at ``root``, its masks laid out for
    BGAugment and the corrupted sets in ``masks``, the pools in ``backgrounds``."""

    root: Path
    masks: Path
    backgrounds: Path


def time_config(
    config: TrainConfig,
    device: str,
    *,
    images: Sequence[Path] = (),
    image_size: tuple[int, int] = (128, 128),
    backgrounds: Path | None = None,
    attributions: Sequence[str] = ("smoothgrad",),
    measure: MeasureTiming | None = None,
) -> ConfigTiming:
    """Time ``config`` (a run's resolved configuration) on ``device`` on a stand-in made of copies of
    ``images`` (synthetic pictures of ``image_size`` when none) and the pools of ``backgrounds`` (synthetic
    when None); the measurement too unless ``measure`` is given (that of its twin without BGAugment). No
    weight file is read or fetched, and nothing is left behind: no file, process or thread."""
    train_geometry = train_geometry_of(config, config.dataset)
    eval_geometry = dataset_class(config.dataset).eval_geometry
    with tempfile.TemporaryDirectory(prefix="bgbias-cost-") as folder:
        stand_in = write_stand_in(Path(folder), config, images, image_size, backgrounds)
        timing_config = config.model_copy(update={
            "dataset": "bench", "root": str(stand_in.root), "device": device,
            "model": config.model.model_copy(update={"pretrained": False, "weights": None}),
            "data": config.data.model_copy(update={"resize": train_geometry.resize,
                                                   "crop": train_geometry.crop,
                                                   "batches_per_epoch": TRAIN_STEPS}),
            "bgaugment": config.bgaugment.model_copy(update={"masks": str(stand_in.masks),
                                                             "backgrounds": str(stand_in.backgrounds)}),
            "schedule": config.schedule.model_copy(update={"watch_test": False}),
            "log": config.log.model_copy(update={"tensorboard": False}),
        })
        # Nothing of the timing is left behind: tqdm's monitor thread is not started meanwhile (its
        # ``monitor_interval`` 0), loader workers end with their loaders, collected on the way out, and the
        # device's cached memory goes back for the run that follows.
        interval, tqdm.monitor_interval = tqdm.monitor_interval, 0
        try:
            return _time_stand_in(timing_config, stand_in, eval_geometry, Path(folder), attributions, measure)
        finally:
            tqdm.monitor_interval = interval
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()


def _time_stand_in(config: TrainConfig, stand_in: StandIn, eval_geometry: EvalGeometry, folder: Path,
                   attributions: Sequence[str], measure: MeasureTiming | None) -> ConfigTiming:
    device = resolve_device(config.device)
    dist = distributed.Distributed()
    run = RunDir(folder / "runs" / "run")
    make_dirs(run.root / "checkpoints")
    started = time.perf_counter()
    inputs = prepare_inputs(config, device, dist)
    session = TrainingSession.start(config, run, inputs, None, device, dist, progress=False, echo=False)
    setup = time.perf_counter() - started
    try:
        session.epoch()  # warm-up: the first steps allocate, the loader starts its workers
        train_batch = _timed(lambda: session.train_steps(), device) / TRAIN_STEPS
        epoch = _timed(session.epoch, device) - session.state.history[-1].get("epoch_start_seconds", 0.0)
        hooks = [lambda number=number: session.method.on_epoch_start(number, session.training_data)
                 for number in range(1, config.schedule.epochs + 1)]
        start = sum(_timed(hook, device) for hook in hooks) / len(inputs.train_items)
        clean, corrupted = _embedding_seconds(session, inputs, eval_geometry, stand_in, folder)
        sets = session.validation or {}
        validated = len(sets.get("val", ())) * clean + len(sets.get("val_corrupted", ())) * corrupted
        epoch_overhead = max(0.0, epoch - TRAIN_STEPS * train_batch - validated)
        if measure is None:
            # The method as evaluation and attribution see a trained run, at the stand-in's geometry.
            model = StandInModel(session.method, device, home=session.run.root,
                                 amp=resolve_amp(config.amp, device),
                                 trained=TrainedOn("bench", Path(config.root)), geometry=eval_geometry)
            evaluation = _evaluation_overhead(model, stand_in, folder, clean, corrupted)
            per_image, explain_overhead = _attribution_seconds(model, stand_in, attributions)
            measure = MeasureTiming(evaluation, tuple(per_image), explain_overhead)
    finally:
        session.close()
    return ConfigTiming(setup, train_batch, epoch_overhead, start, clean, corrupted, measure)


def _embedding_seconds(session: Any, inputs: Any, eval_geometry: EvalGeometry, stand_in: StandIn,
                       folder: Path) -> tuple[float, float]:
    """Seconds per image of a clean and a corrupted pass at evaluation batch size over the stand-in's
    validation split (its corrupted set from the test pool, as evaluation's)."""
    items = inputs.val_items
    [path] = make_corrupted_manifests(inputs.dataset, "val", repeats=1, backgrounds=stand_in.backgrounds,
                                      out_dir=folder / "corrupted", geometry=eval_geometry)
    manifest = load_manifest(path, inputs.dataset, stand_in.backgrounds, eval_geometry)
    sets = (EvalImages(items, eval_geometry), CorruptedImages(items, manifest, stand_in.masks, "bench"))
    clean, corrupted = (_timed(lambda images=images: embed_images(
        session.method, images, session.device, batch_size=EVAL_BATCH_SIZE,
        workers=session.config.data.workers, amp=session.amp), session.device) / len(items)
        for images in sets)
    return clean, corrupted


def _evaluation_overhead(model: Any, stand_in: StandIn, folder: Path, clean: float,
                         corrupted: float) -> float:
    """What ``bgbias eval --corrupted`` adds to its embeddings: one evaluation of the stand-in's test split
    (one corrupted repeat), less the time of its two embedding passes."""
    request = MeasureRequest(corrupted=True, repeats=1, masks=stand_in.masks,
                             backgrounds=stand_in.backgrounds, manifests=folder / "corrupted-test",
                             progress=False)
    test = len(split_items(open_dataset("bench", stand_in.root), "test", "fixed", 0))
    seconds = _timed(lambda: evaluate(model, request, log=lambda _: None), model.device)
    return max(0.0, seconds - test * (clean + corrupted))


def _attribution_seconds(model: Any, stand_in: StandIn,
                         attributions: Sequence[str]) -> tuple[list[float], float]:
    """Seconds per image of each attribution, through ``bgbias explain`` itself (the difference of two
    warmed-up runs of 1 and 1 + :data:`EXPLAINED_IMAGES` images), and what the explains add to their images,
    galleries included."""
    per_image, overheads = [], []
    for attribution in attributions:
        base = MeasureRequest(attribution=attribution, masks=stand_in.masks, progress=False)

        def explained(images: int, gallery: int, base: MeasureRequest = base) -> float:
            request = dataclasses.replace(base, limit=images, gallery_count=gallery, force=True)
            return _timed(lambda: explain(model, request, log=lambda _: None), model.device)

        several = 1 + EXPLAINED_IMAGES
        explained(1, 0)  # warm-up: the attribution's first passes allocate
        one, many, pictured = explained(1, 0), explained(several, 0), explained(several, several)
        image = max(0.0, (many - one) / EXPLAINED_IMAGES)
        row = max(0.0, (pictured - many) / several)
        per_image.append(image)
        overheads.append(max(0.0, one - image) + base.gallery_count * row)
    return per_image, sum(overheads)


def _timed(function: Callable[[], object], device: torch.device) -> float:
    """Wall seconds of ``function()`` on ``device`` (CUDA work waited for at both ends)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    function()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - started


# ---------------------------------------------------------------------------------------------- stand-in
def write_stand_in(folder: Path, config: TrainConfig, images: Sequence[Path], image_size: tuple[int, int],
                   backgrounds: Path | None) -> StandIn:
    """The stand-in of ``config``'s dataset in ``folder``: enough train classes for :data:`STAND_IN_BATCHES`
    batches, :data:`EMBED_IMAGES` validation and test images each, exact masks where BGAugment reads them, and
    the pools (``backgrounds`` when it holds both, else synthetic)."""
    root = folder / "bench"
    m = config.data.m_per_class
    classes = max(2, STAND_IN_BATCHES * config.data.batch_size // m) + 1
    per_split = {"train": [m] * classes, "val": [EMBED_IMAGES // 8] * 8, "test": [EMBED_IMAGES // 8] * 8}
    rng = np.random.default_rng(0)
    rows, number = [], 0
    for split, sizes in per_split.items():
        for size in sizes:
            label = len({row[1] for row in rows})
            for _ in range(size):
                source = images[number % len(images)] if images else None
                image = Path("images") / f"{number:05d}{source.suffix if source else '.jpg'}"
                mask = Path("masks") / f"{number:05d}.png"
                _write_image(root / image, source, image_size, rng)
                _write_mask(root / mask, root / image)
                rows.append([image.as_posix(), str(label), f"class_{label:03d}", split, mask.as_posix()])
                number += 1
    with (root / "index.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["image", "label", "class_name", "split", "ground_truth_mask"])
        writer.writerows(rows)
    masks = copy_ground_truth_masks(open_dataset("bench", root).items(), folder / "masks").out_dir
    if backgrounds is None or not all((backgrounds / pool).is_dir() for pool in ("train", "test")):
        backgrounds = folder / "backgrounds"
        for pool in ("train", "test"):
            for index in range(STAND_IN_POOL):
                _write_image(backgrounds / pool / f"{index}.jpg", None, (512, 384), rng)
    return StandIn(root, masks, backgrounds)


def _write_image(path: Path, source: Path | None, size: tuple[int, int], rng: np.random.Generator) -> None:
    """A copy of ``source``, or a smooth random picture of ``size`` (JPEG decodes as photographs do)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if source is not None:
        shutil.copyfile(source, path)
        return
    coarse = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
    picture = Image.fromarray(coarse).resize(size, Image.BILINEAR)
    noise = rng.integers(-12, 13, (size[1], size[0], 3))
    pixels = np.clip(np.asarray(picture, dtype=np.int16) + noise, 0, 255).astype(np.uint8)
    Image.fromarray(pixels).save(path, format="JPEG", quality=90)


def _write_mask(path: Path, image: Path) -> None:
    """An ellipse over the middle of ``image``: the object BGAugment keeps."""
    width, height = load_image(image).size  # upright: the size the image is read at, as its mask must be
    mask = Image.new("L", (width, height), 0)
    ImageDraw.Draw(mask).ellipse((width // 5, height // 5, 4 * width // 5, 4 * height // 5), fill=255)
    path.parent.mkdir(parents=True, exist_ok=True)
    mask.save(path, format="PNG")
