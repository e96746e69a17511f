"""What a study will cost on a device, for ``bgbias study --dry-run``: seconds per step, device-hours per
method and in total. A run step's cost is its planned work (:class:`PlannedWork`) times what each unit of
work takes on the device, timed once per distinct configuration (:mod:`~bgbias.study.cost_timing`).

Early stopping cannot be foreseen: a run is costed for all its epochs, so a run that stops early costs less.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from bgbias.assets.catalog import DEFAULT_ASSETS
from bgbias.assets.store import record_path, resolve_home
from bgbias.bench.build import BENCH_PRESETS
from bgbias.data.images import load_image
from bgbias.data.registry import open_dataset
from bgbias.data.samplers import MPerClassBatchSampler
from bgbias.data.splits import split_items
from bgbias.engine.config import TrainConfig
from bgbias.errors import DatasetError
from bgbias.hardware import usable_cores
from bgbias.methods.registry import method_class
from bgbias.options import EXPLAIN_IMAGES
from bgbias.saliency.sessions import Inference, open_session
from bgbias.study.bench import built_bench
from bgbias.study.cost_timing import ConfigTiming, MeasureTiming, time_config
from bgbias.study.plan import StudyRun
from bgbias.study.runs import REPEATS, run_config
from bgbias.study.sizes import SplitSizes, split_sizes
from bgbias.study.spec import StudySpec
from bgbias.variants.variant_manifests import variant_repeats
from bgbias.variants.variants import VARIANTS


@dataclass(frozen=True)
class RunCost:
    """Seconds of one run step on the target device: training it (0 once its training finished), then
    measuring it (evaluation and attribution)."""

    train: float
    measure: float

    @property
    def total(self) -> float:
        return self.train + self.measure


@dataclass(frozen=True)
class PlannedWork:
    """What one run step does, counted: ``epochs`` of ``batches`` loader batches over ``train_images``,
    ``validations`` passes over that many clean and corrupted images (epoch 0's included), an evaluation of
    that many clean and corrupted images, and ``attributed`` images for each attribution."""

    epochs: int
    batches: int
    train_images: int
    validations: int
    validation_clean: int
    validation_corrupted: int
    evaluation_clean: int
    evaluation_corrupted: int
    attributed: int


def planned_work(config: TrainConfig, sizes: SplitSizes, *, profile: bool,
                 explain_images: int = EXPLAIN_IMAGES, compare_masks: bool = False) -> PlannedWork:
    """The work of a run of ``config`` on a dataset of ``sizes``, measured as
    :func:`~bgbias.study.runs.measure_run` measures it (with ``profile``, the profile's sets too; with
    ``compare_masks``, the corrupted repeats cut out again with the second masks)."""
    d, schedule = config.data, config.schedule
    if d.batches_per_epoch is not None:
        batches = d.batches_per_epoch
    else:
        labels = [label for label, count in enumerate(sizes.train_classes) for _ in range(count)]
        batches = len(MPerClassBatchSampler(labels, d.m_per_class, d.batch_size, config.seed))
    watched = sizes.test if schedule.watch_test else 0
    corrupted_val = sizes.val if config.monitor == "corrupted" else 0
    profile_sets = sum(variant_repeats(name, REPEATS) for name in VARIANTS) if profile else 0
    compared_sets = REPEATS if compare_masks else 0
    return PlannedWork(
        epochs=schedule.epochs,
        batches=batches,
        train_images=sum(sizes.train_classes),
        validations=schedule.epochs + int(schedule.validate_untrained),
        validation_clean=sizes.val + watched,
        validation_corrupted=corrupted_val + watched,
        evaluation_clean=sizes.test,
        evaluation_corrupted=(REPEATS + profile_sets + compared_sets) * sizes.test,
        attributed=min(explain_images, sizes.test),
    )


def run_seconds(work: PlannedWork, timing: ConfigTiming) -> tuple[float, float]:
    """(training, measurement) seconds of ``work`` at ``timing``'s rates."""
    validation = (work.validation_clean * timing.clean_image
                  + work.validation_corrupted * timing.corrupted_image)
    train = (timing.setup + work.epochs * (work.batches * timing.train_batch + timing.epoch_overhead)
             + work.train_images * timing.epoch_start + work.validations * validation)
    measured = timing.measure
    measure = (work.evaluation_clean * timing.clean_image + work.evaluation_corrupted * timing.corrupted_image
               + measured.evaluation_overhead
               + sum(work.attributed * seconds for seconds in measured.attribution_images)
               + measured.explain_overhead)
    return train, measure


def timing_key(config: TrainConfig, *, measured: bool = False) -> str:
    """What makes two runs' steps cost the same: their configuration but the seed, the schedule and the
    device; with ``measured`` (measuring them), BGAugment left out too, as it is not in the trained model."""
    settings = config.as_dict()
    for key in ("seed", "device", "schedule", *(("bgaugment",) if measured else ())):
        settings.pop(key, None)
    return json.dumps(settings, sort_keys=True)


def estimate_runs(
    spec: StudySpec,
    runs: Sequence[StudyRun],
    *,
    profile: bool,
    device: str,
    explain_images: int = EXPLAIN_IMAGES,
    trained: Collection[str] = (),
    timer: Callable[..., ConfigTiming] = time_config,
) -> dict[str, RunCost]:
    """The cost of each of ``runs`` on ``device``, by folder name. Each distinct configuration
    (:func:`timing_key`) is timed once by ``timer``, its measurement once for it and its twin without
    BGAugment; a run in ``trained`` (folder names of runs whose training finished) costs its measurement
    alone."""
    sizes = split_sizes(spec)
    images = sample_images(spec)
    size = picture_size(spec)
    backgrounds = Path(spec.backgrounds)
    timings: dict[str, ConfigTiming] = {}
    measures: dict[str, MeasureTiming] = {}
    costs = {}
    for run in runs:
        config = run_config(spec, run, device=device)
        key = timing_key(config)
        if key not in timings:
            own = method_class(config.method).own_attribution
            attributions = ("smoothgrad",) if own is None else ("smoothgrad", own)
            measured = timing_key(config, measured=True)
            timings[key] = timer(config, device, images=images, image_size=size, backgrounds=backgrounds,
                                 attributions=attributions, measure=measures.get(measured))
            measures[measured] = timings[key].measure
        work = planned_work(config, sizes, profile=profile, explain_images=explain_images,
                            compare_masks=spec.compare_masks is not None)
        train, measure = run_seconds(work, timings[key])
        costs[run.folder_name] = RunCost(0.0 if run.folder_name in trained else train, measure)
    return costs


# ------------------------------------------------------------------------------------------------ dataset
SAMPLE_IMAGES = 16
"""Images of the dataset the timing's stand-in is made of (cycled), where the dataset is there."""


def sample_images(spec: StudySpec) -> list[Path]:
    """The first training images of the study's dataset (none where it is not there yet)."""
    try:
        dataset = open_dataset(spec.dataset, spec.root)
        return [Path(item.image) for item in split_items(dataset, "train", "fixed", 0)[:SAMPLE_IMAGES]]
    except DatasetError:
        return []


def picture_size(spec: StudySpec) -> tuple[int, int]:
    """(width, height) of synthetic pictures standing in for a dataset not there yet: the bench's view size,
    else CUB's and Cars196's typical 500 × 375."""
    if spec.bench is not None:
        side = BENCH_PRESETS[spec.bench.preset].image_size
        return side, side
    return 500, 375


# -------------------------------------------------------------------------------------- steps around runs
PREPARE_SECONDS = {"assets verified": 1.0, "assets fetched": 60.0, "pools": 12.0, "bench per image": 0.0026}
"""What ``prepare``'s parts took on the reference machine (2 CPU cores, docs/benchmarks.md): verifying the
installed assets, fetching them (mostly the network's time), completing the background pools and building
the bench (per image of it, 1,984 for the small preset). A real dataset's layout check takes seconds."""


def estimate_prepare(spec: StudySpec, *, done: bool) -> float:
    """Seconds of the study's ``prepare`` step (0 when ``done``): the pools where ``spec.backgrounds`` lacks
    them, and on the bench the assets (fetched or verified) and the bench where it is not built. CPU work on
    the machine that runs it, whatever the device."""
    if done:
        return 0.0
    seconds = 0.0 if all((Path(spec.backgrounds) / pool).is_dir() for pool in ("train", "test")) \
        else PREPARE_SECONDS["pools"]
    bench = spec.bench
    if bench is None:
        return seconds
    # Every default asset with its install record: ``prepare`` only verifies them.
    installed = all(record_path(name, resolve_home(None)).is_file() for name in DEFAULT_ASSETS)
    seconds += PREPARE_SECONDS["assets verified" if installed else "assets fetched"]
    if built_bench(Path(spec.root), preset=bench.preset, rho=bench.rho, seed=bench.seed) is None:
        seconds += split_sizes(spec).images * PREPARE_SECONDS["bench per image"]
    return seconds


MASK_TIMING_IMAGES = 2
"""Images timed through U²-Net (after one that warms the session up)."""


def estimate_masks(spec: StudySpec, images: int, *, device: str, made: Collection[str] = ()) -> float:
    """Seconds of the masks steps over ``images`` images on ``device``: each U²-Net model the study makes
    masks with (its own and the second source's, :meth:`~bgbias.study.spec.StudySpec.made_sources`) but
    those of ``made`` (whose masks these steps made before, kept), timed by :func:`estimate_model_masks`; 0
    when it makes none."""
    if images == 0:
        return 0.0
    return sum(estimate_model_masks(spec, model, images, device=device) for model, _ in spec.made_sources()
               if model not in made)


def estimate_model_masks(spec: StudySpec, model: str, images: int, *, device: str) -> float:
    """Seconds of U²-Net ``model`` over ``images`` images on ``device``: one warmed-up batch of the dataset's
    first images (synthetic ones where it is not there) through its session, against the images' decoding
    and writing, which the pipeline's workers do meanwhile. A missing model file is the ``AssetError`` of
    ``bgbias masks``."""
    session = open_session(model, Inference(device="cpu" if device == "cpu" else "auto"))
    pictures = [load_image(path) for path in sample_images(spec)[:MASK_TIMING_IMAGES]]
    if not pictures:
        pictures = [Image.new("RGB", picture_size(spec), (90, 120, 150))] * MASK_TIMING_IMAGES
    started = time.perf_counter()
    prepared = [session.prepare(picture) for picture in pictures]
    cpu = time.perf_counter() - started
    batch = [prepared[index % len(prepared)] for index in range(session.info.batch)]
    with session.running():
        session.infer(batch)
        started = time.perf_counter()
        raws = session.infer(batch)
        network = time.perf_counter() - started
    started = time.perf_counter()
    for raw, picture in zip(raws, pictures, strict=False):
        session.finish(raw, picture.size)
    per_image = (cpu + time.perf_counter() - started) / len(pictures)
    info = session.info
    return images * max(network / info.batch / info.streams, per_image / usable_cores())


PAGE_SECONDS = (1.5, 0.1)
"""The page (:func:`~bgbias.study.page.report_study`) on the reference machine, seconds: a fixed part (the
figures, the galleries of the first method's pair: the quick preset's page took 1.5 s on 2 busy cores) and
a part per run (reading its reports into the tables)."""


def estimate_page(runs: int) -> float:
    """Seconds of the study's page over ``runs`` runs."""
    fixed, per_run = PAGE_SECONDS
    return fixed + per_run * runs


# --------------------------------------------------------------------------------------------------- table
@dataclass(frozen=True)
class PlanCost:
    """What the steps left of a plan will cost on ``device``: each run's (by folder name), the prepare step,
    the masks shards left and the pages, in seconds."""

    runs: list[StudyRun]
    costs: dict[str, RunCost]
    prepare: float
    masks: float
    page: float
    device: str

    @property
    def total(self) -> float:
        return self.prepare + self.masks + self.page + sum(cost.total for cost in self.costs.values())

    def table(self) -> str:
        """The dry run's cost table: per method the device-hours of its runs (training, measurement, total),
        then prepare, masks, the page and the total; minutes beside hours under an hour."""
        by_method: dict[str, list[RunCost]] = {}
        for run in self.runs:
            by_method.setdefault(run.method, []).append(self.costs[run.folder_name])
        rows = [("step", "runs", "train", "measure", "total")]
        for method, method_costs in by_method.items():
            seconds = [sum(c.train for c in method_costs), sum(c.measure for c in method_costs),
                       sum(c.total for c in method_costs)]
            rows.append((method, str(len(method_costs)), *map(_hours, seconds)))
        for name, seconds in (("prepare", self.prepare), ("masks", self.masks), ("page", self.page)):
            rows.append((name, "", "", "", _hours(seconds)))
        rows.append(("total", str(len(self.runs)), "", "", _hours(self.total)))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = [f"cost on {self.device} (device-hours; early stopping not foreseen: every epoch counted)"]
        for row in rows:
            cells = [row[0].ljust(widths[0]), *(cell.rjust(width) for cell, width in zip(row[1:], widths[1:],
                                                                                        strict=True))]
            lines.append("  ".join(cells).rstrip())
        return "\n".join(lines)


def _hours(seconds: float) -> str:
    """``1.25 h``, or ``0.07 h (4.2 min)`` under an hour."""
    hours = seconds / 3600
    return f"{hours:.2f} h" if hours >= 1 else f"{hours:.2f} h ({seconds / 60:.1f} min)"
