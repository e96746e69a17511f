"""A study's ``run`` step: train (or keep, or resume) a planned run while holding its folder, then measure it
(evaluation and foreground scores)."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bgbias.attribution.run import explain
from bgbias.engine.config import PATH_KEYS, load_run_config, parse_override, resolve_config
from bgbias.engine.run_dir import DONE, claim_run, open_run_dir, read_record
from bgbias.engine.trained import load_trained
from bgbias.engine.training import resume_training, train
from bgbias.errors import BgbiasError, OptionError
from bgbias.fileio import write_json_atomic
from bgbias.measurement.request import MeasureRequest
from bgbias.methods.registry import method_class
from bgbias.paths import backgrounds_root, located_key
from bgbias.report.evaluate import evaluate
from bgbias.study.plan import StudyRun
from bgbias.study.spec import COMPUTE_KEYS, StudySpec

REPEATS = 5


def study_folder(runs: Path, spec: StudySpec) -> Path:
    """The folder of a study's plan and runs: one per bench (or dataset) and mask source."""
    if spec.bench is not None:
        bench = spec.bench
        return runs / "study" / f"bench-{bench.preset}-rho{bench.rho:g}-seed{bench.seed}-{spec.masks}"

    # The user's own masks folder names the study: two folders of masks for one dataset are two studies.
    return runs / "study" / located_key(f"{spec.dataset}-{spec.masks}",
                                        spec.root if spec.made_masks else spec.masks_dir)


def run_config(spec: StudySpec, run: StudyRun, *, device: str = "auto") -> Any:
    """The configuration ``run`` trains with in the study ``spec``: the dataset's protocol and the method's
    own configuration (:func:`~bgbias.engine.config.resolve_config`), the study's inputs, then the run's
    ``--set`` settings."""
    options = {"root": spec.root, "bgaugment.enabled": run.bgaugment, "bgaugment.masks": spec.masks_dir,
               "bgaugment.backgrounds": spec.backgrounds, "device": device, "seed": run.seed,
               "schedule.watch_test": run.watch_test}
    return resolve_config(run.method, spec.dataset, options=options, overrides=run.settings)


def train_study_run(folder: Path, run: StudyRun, spec: StudySpec, device: str, log: Callable[[str], None],
                    *, processes: int = 1) -> Path:
    """Train (or resume, or keep) one run of the study while holding its folder, in ``processes`` processes
    under torchrun when more than one; return the folder."""
    run_dir = folder / run.folder_name
    with claim_run(run_dir, wait=True):
        if (run_dir / "config.json").is_file():
            check_trained_as_planned(run_dir, run, spec)
            # A missing or damaged run.json reads as unfinished: resuming from the checkpoints writes it
            # again.
            record = read_record(open_run_dir(run_dir))
            if record is not None and record.status in DONE:
                log(f"{run.label}: trained already ({run_dir})")
                return run_dir
            log(f"resuming {run.label} ({run_dir})")
            if processes == 1:
                resume_training(run_dir)
                return run_dir
            command = ["--resume", str(run_dir)]
        else:
            log(f"training {run.label} on {spec.dataset}")
            config = run_config(spec, run, device=device)
            if processes == 1:
                train(config, run_dir=run_dir)
                return run_dir
            planned = folder / "logs" / f"{run.folder_name}.config.json"
            write_json_atomic(planned, config.as_dict())
            command = ["--method", run.method, "--dataset", spec.dataset, "--config", str(planned),
                       "--run-dir", str(run_dir)]
    # torchrun's trainers hold the run themselves (the plan's claim keeps other workers away meanwhile).
    _torchrun(processes, command)
    return run_dir


def _torchrun(processes: int, train_args: list[str]) -> None:
    """``torchrun --standalone --nproc_per_node PROCESSES -m bgbias train ARGS``; a failure names the run's
    log."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
               str(processes), "-m", "bgbias", "train", *train_args, "--no-progress"]
    trainers = subprocess.Popen(command)
    try:
        status = trainers.wait()
    except KeyboardInterrupt:  # torchrun passes SIGTERM on to its trainers, which checkpoint and stop
        trainers.send_signal(signal.SIGTERM)
        trainers.wait()
        raise
    if status != 0:
        raise BgbiasError(f"training under torchrun ended with status {status}",
                          fix="see the run's train.log and the worker's log; the run resumes from its last "
                              "checkpoint when the study runs again")


def check_trained_as_planned(run_dir: Path, run: StudyRun, spec: StudySpec) -> None:
    """Refuse to keep or resume a run folder trained with other settings than the plan trains now (a default
    changed since, as AVSL's certainty did): its numbers would appear under the plan's name. How a run is
    computed (:data:`~bgbias.study.spec.COMPUTE_KEYS`) and where its inputs lie do not count. The fix names
    the folder where ``--set`` with the run's own settings finds it. A configuration that cannot be read is
    left to resuming, which reports it."""
    try:
        saved = _flat(load_run_config(run_dir / "config.json").as_dict())
    except OptionError:
        return
    planned = _flat(run_config(spec, run).as_dict())
    ignored = {*COMPUTE_KEYS, *PATH_KEYS}
    differ = {key: (saved.get(key), planned.get(key)) for key in sorted(saved.keys() | planned.keys())
              if key not in ignored and not key.startswith("log.") and saved.get(key) != planned.get(key)}
    if not differ:
        return
    own = dict(parse_override(text) for text in run.settings)
    own.update({key: ran for key, (ran, _) in differ.items()})
    settings = tuple(f"{key}={_setting_text(value)}" for key, value in own.items())
    variant = dataclasses.replace(run, settings=settings)
    found = "; ".join(f"{key} = {_setting_text(ran)} (the plan: {_setting_text(now)})"
                      for key, (ran, now) in differ.items())
    raise OptionError(
        f"the run folder holds a run trained with other settings than the study trains now: {found}",
        path=run_dir,
        fix=f"move the folder aside to train the run again as planned, or rename it to {variant.folder_name} "
            f"to keep it as the variant that `bgbias study ... --set {' --set '.join(variant.settings)}` "
            "studies",
    )


def _flat(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"optim": {"lr_head": 1}}`` → ``{"optim.lr_head": 1}``; a method's options stay one value each."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _setting_text(value: Any) -> str:
    """A value as ``--set`` reads it back: JSON, a string bare unless it would read as something else."""
    if isinstance(value, str):
        try:
            json.loads(value)
        except ValueError:
            return value
    return json.dumps(value)


def measure_run(run_dir: Path, masks: Path, backgrounds: Path, profile: bool, explain_images: int,
                device: str, log: Callable[[str], None], compare_masks: Path | None = None) -> None:
    """``bgbias eval --corrupted --repeats 5 [--profile --worst-k 5] [--compare-masks COMPARE_MASKS] --masks
    MASKS --backgrounds BACKGROUNDS`` and ``bgbias explain`` of one study run (SmoothGrad, and the method's
    own attribution where it has one); what was measured before comes from the caches. The profile's worst
    case is over the paper's 5 repeats, which keeps it to 13 embedding passes beyond them; the second masks
    add 5."""
    with claim_run(run_dir, wait=True):
        trained = load_trained(run_dir, device=device)
        # A run profiled before (the full study's, reused by the dial) keeps its profile: it comes from the
        # cache.
        profile = profile or any((run_dir / "eval").glob("*-test/profile.csv"))
        # The default pools are named by default, so the evaluation's folder is the one `bgbias eval` uses.
        pools = None if backgrounds == backgrounds_root().resolve() else backgrounds
        request = MeasureRequest(corrupted=True, repeats=REPEATS, profile=profile, worst_k=REPEATS,
                                 limit=explain_images, masks=masks, backgrounds=pools)
        evaluate(trained, dataclasses.replace(request, compare_masks=compare_masks), log=log)
        explain(trained, request, log=log)
        own = method_class(trained.config.method).own_attribution
        if own is not None:
            explain(trained, dataclasses.replace(request, attribution=own), log=log)
