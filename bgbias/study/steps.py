"""The steps of a study's plan and what each does: ``prepare`` (the bench or the dataset's check, the pools),
``masks-<i>of<n>`` (a shard of the U²-Net masks), ``run/<run>`` (train one run, then measure it) and
``page/<folder>`` (the page of a set of runs, once each is done or failed)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from pathlib import Path

from bgbias.assets.catalog import DEFAULT_ASSETS
from bgbias.assets.fetch import fetch
from bgbias.backgrounds.pool import list_pool, pool_folder
from bgbias.data.items import items_digest
from bgbias.data.registry import open_dataset
from bgbias.errors import AssetError, BgbiasError
from bgbias.paths import backgrounds_root
from bgbias.saliency.pipeline import make_masks
from bgbias.saliency.sessions import Inference
from bgbias.study.bench import prepare_pools, prepare_study_bench
from bgbias.study.ledger import PageArgs, Plan, RunArgs, Step
from bgbias.study.page import report_study
from bgbias.study.plan import StudyPlan
from bgbias.study.runs import REPEATS, measure_run, train_study_run
from bgbias.study.sizes import split_sizes
from bgbias.study.spec import StudySpec

PREPARE = "prepare"

IMAGES_PER_SHARD = 5000
"""Images per masks step: SOP's 120,053 make 25 shards that workers and array tasks share; a bench, one."""


def page_step_id(plan: StudyPlan) -> str:
    return f"page/{plan.report_folder}"


def mask_shards(spec: StudySpec) -> int:
    """How many masks steps the study's images are split into (none when every masks folder is found, not
    made)."""
    if not spec.made_sources():
        return 0
    if spec.bench is not None:  # not built yet when the plan is made; a bench is a few thousand images
        return 1

    return max(1, math.ceil(split_sizes(spec).images / IMAGES_PER_SHARD))


def planned_steps(spec: StudySpec, plan: StudyPlan, shards: int) -> dict[str, Step]:
    """The steps ``plan`` asks for, in the order they are taken: prepare, the masks shards, the runs seed by
    seed, the page."""
    masks = [f"masks-{index + 1}of{shards}" for index in range(shards)]
    steps = {PREPARE: Step(kind="prepare")}
    steps.update({step_id: Step(kind="masks", needs=[PREPARE], shard=[index, shards])
                  for index, step_id in enumerate(masks)})
    runs = {}
    for run in plan.runs():
        args = RunArgs(method=run.method, bgaugment=run.bgaugment, seed=run.seed, watch_test=run.watch_test,
                       settings=list(run.settings), profile=plan.profile,
                       explain_images=plan.explain_images, compare_masks=spec.compare_masks is not None)
        runs[f"run/{run.folder_name}"] = Step(kind="run", needs=[PREPARE, *masks], run=args)
    steps.update(runs)
    variant = f", every run with {', '.join(plan.settings)}" if plan.settings else ""
    steps[page_step_id(plan)] = Step(kind="page", needs=list(runs),
                                     page=PageArgs(folder=plan.report_folder, variant=variant))
    return steps


# ---------------------------------------------------------------------------------------------- executing
def execute_step(folder: Path, plan: Plan, step_id: str, device: str, processes: int,
                 log: Callable[[str], None]) -> dict[str, str]:
    """Do the step ``step_id`` of ``plan`` (study folder ``folder``) on ``device`` (a run's training in
    ``processes`` processes); the digests of its inputs."""
    step, spec = plan.steps[step_id], plan.spec
    if step.kind == "prepare":
        return prepare(spec, log)
    if step.kind == "masks":
        assert step.shard is not None
        return make_mask_shard(spec, (step.shard[0], step.shard[1]), device, log)
    if step.kind == "run":
        assert step.run is not None
        return run_and_measure(folder, spec, step.run, device, processes, log)
    assert step.page is not None
    return write_page(folder, plan, step_id, log)


def prepare(spec: StudySpec, log: Callable[[str], None]) -> dict[str, str]:
    """The bench (assets, pools, the bench of the spec's settings, its exact masks where asked) or, for a
    dataset, the pools and a check of its layout and masks."""
    if spec.bench is not None:
        prepare_study_bench(spec, log)
    else:
        if Path(spec.backgrounds) == backgrounds_root().resolve():
            log("fetching assets (verified against pinned checksums) and completing the background pools")
            fetch(DEFAULT_ASSETS)
            prepare_pools()
        for pool in ("train", "test"):
            list_pool(pool_folder(spec.backgrounds, pool))
        log(f"checking the {spec.dataset} dataset at {spec.root}")
        open_dataset(spec.dataset, spec.root).items()
    return {"spec": _digest(spec.model_dump_json().encode())}


def make_mask_shard(spec: StudySpec, shard: tuple[int, int], device: str,
                    log: Callable[[str], None]) -> dict[str, str]:
    """The U²-Net masks of one shard of the dataset's images, of each model the study makes masks with (its
    own, then the second source's); those already made are kept."""
    items = open_dataset(spec.dataset, spec.root).items()
    models = spec.made_sources()
    for model, masks_dir in models:
        log(f"{model} masks of shard {shard[0] + 1}/{shard[1]} of {len(items)} images into {masks_dir}")
        made = make_masks(items, masks_dir, model=model, inference=Inference(device=device), shard=shard,
                          progress=False)
        if made.failed:
            raise AssetError(f"{made.failed} image(s) got no mask", path=made.manifest,
                             fix="see the failures in the manifest (bgbias masks names each image and why), "
                                 "then run the study again")
    return {"model": "+".join(model for model, _ in models), "items": items_digest(items)[:16]}


def run_and_measure(folder: Path, spec: StudySpec, args: RunArgs, device: str, processes: int,
                    log: Callable[[str], None]) -> dict[str, str]:
    """Train (or resume, or keep) the run, then evaluate and explain it (:mod:`bgbias.study.runs`)."""
    run = args.study_run()
    run_dir = train_study_run(folder, run, spec, device, log, processes=processes)
    compared = Path(spec.compare_masks_dir) if args.compare_masks and spec.compare_masks_dir else None
    extras = f"{', the profile' if args.profile else ''}{', the second masks' if compared else ''}"
    log(f"{run.label}: clean and {REPEATS} corrupted repeats{extras}, "
        f"foreground scores of {args.explain_images} test images")
    measure_run(run_dir, Path(spec.masks_dir), Path(spec.backgrounds), args.profile, args.explain_images,
                device, log, compared)
    return {"config": _file_digest(run_dir / "config.json")}


def write_page(folder: Path, plan: Plan, step_id: str, log: Callable[[str], None]) -> dict[str, str]:
    """The page of the runs the page step needs that are done; the failed ones are named on it."""
    step = plan.steps[step_id]
    assert step.page is not None
    done = [plan.steps[need] for need in step.needs if plan.steps[need].state == "done"]
    failures = {need.removeprefix("run/"): plan.steps[need].error or "failed" for need in step.needs
                if plan.steps[need].state == "failed"}
    if not done:
        raise BgbiasError(f"every run failed ({len(failures)}): {', '.join(failures)}",
                          fix="see each error with `bgbias study --status`, then run the command again")
    run_dirs = [folder / s.run.study_run().folder_name for s in done if s.run is not None]
    runs = f"{len(run_dirs)} run{'s' * (len(run_dirs) > 1)}"
    log(f"the page of {runs} in {folder / step.page.folder}")
    title = f"bgbias study: {plan.spec.title}, {runs}{step.page.variant}"
    dials: list[Path] = []
    if plan.spec.bench is not None:
        bench = plan.spec.bench
        dials = sorted(folder.parent.glob(f"dial-*-bench-{bench.preset}-seed{bench.seed}/dial.png"))
    report_study(run_dirs, folder / step.page.folder, title=title, dials=dials, failures=failures)
    return {f"run/{run_dir.name}": _file_digest(next(iter(sorted(run_dir.glob("eval/*-test/report.json"))),
                                                     run_dir / "run.json"))
            for run_dir in run_dirs}


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _file_digest(path: Path) -> str:
    try:
        return _digest(path.read_bytes())
    except OSError:
        return "missing"
