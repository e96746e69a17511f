"""The commands of one model: ``train`` it, score it (``eval``) and ``explain`` it; a model bgbias did not
train is named with ``--model``."""

from __future__ import annotations

import functools
from pathlib import Path

import click

from bgbias import options as rules
from bgbias.cli.options import (
    AMP_OPTION,
    BYTES,
    DEVICE_OPTION,
    MEMORY_FORMAT_OPTION,
    PATH_DIR,
    TRUST_MODEL_OPTION,
    dataset_options,
    given_options,
    loader_options,
    option_type,
    options,
    split_options,
)
from bgbias.errors import OptionError


@click.command("train")
@click.option("--method", default="multi_similarity", show_default=True, help="See `bgbias methods`.")
@dataset_options("Dataset to train on.", default="bench")
@split_options
@click.option("--bgaugment", is_flag=True, help="Composite training images onto train-pool backgrounds.")
@click.option("--backbone", default=None, help="Backbone (default: the protocol's; see `bgbias methods`).")
@click.option("--weights", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="ImageNet weight file for the backbone (for machines without internet).")
@click.option("--epochs", type=click.IntRange(min=1), default=None, help="Epochs (default: the protocol's).")
@click.option("--seed", type=click.IntRange(min=0), default=None, help="Seed of the run (default 0).")
@click.option("--device", default=None, help="auto (CUDA when present), cpu, cuda or cuda:N.")
@click.option("--workers", type=click.IntRange(min=0), default=None,
              help="Data loader worker processes (default: data.workers, auto: sized to the machine).")
@click.option("--masks", type=PATH_DIR, default=None, help="Saliency masks (default masks/<dataset>).")
@click.option("--backgrounds", type=PATH_DIR, default=None,
              help="Background pools: a folder with train/ (default ./backgrounds).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="JSON file with settings (the layout of a run's config.json).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override one setting, e.g. --set optim.lr_head=0.001 (repeatable).")
@click.option("--run-dir", type=PATH_DIR, default=None, help="Folder of this run (default runs/<name>).")
@click.option("--resume", type=PATH_DIR, default=None,
              help="Continue the run in this folder from its last checkpoint (takes no other settings).")
@click.option("--no-progress", is_flag=True, help="No progress bars.")
def train(method: str, dataset_name: str, root: Path | None, protocol: str, fold: int, bgaugment: bool,
          backbone: str | None, weights: Path | None, epochs: int | None, seed: int | None,
          device: str | None, workers: int | None, masks: Path | None, backgrounds: Path | None,
          config_file: Path | None, overrides: tuple[str, ...], run_dir: Path | None, resume: Path | None,
          no_progress: bool) -> None:
    """Train a method, with or without BGAugment; validation MAP@R every epoch, checkpoints, resume."""
    from bgbias.engine.training import resume_training
    from bgbias.report.console import format_training_summary

    if resume is not None:
        ctx = click.get_current_context()
        given = given_options(ctx, set(ctx.params) - {"resume", "no_progress"})
        if given:
            raise OptionError(f"--resume continues a run with its saved settings; remove {', '.join(given)}",
                              fix="pass only --resume RUN (and --no-progress)")
        result = resume_training(resume, progress=not no_progress)
    else:
        from bgbias.engine.config import resolve_config
        from bgbias.engine.training import train as train_run

        settings = {
            "root": str(root) if root else None, "protocol": protocol, "fold": fold,
            "bgaugment.enabled": bgaugment or None, "model.backbone": backbone,
            "model.weights": str(weights) if weights else None, "schedule.epochs": epochs, "seed": seed,
            "device": device, "data.workers": workers, "bgaugment.masks": str(masks) if masks else None,
            "bgaugment.backgrounds": str(backgrounds) if backgrounds else None,
        }
        config = resolve_config(
            method, dataset_name, config_file=config_file,
            options={key: value for key, value in settings.items() if value is not None}, overrides=overrides,
        )
        result = train_run(config, run_dir=run_dir, progress=not no_progress)
    click.echo(format_training_summary(result))


_EXTERNAL_PARAMS = ("model_args", "input_size", "resize", "normalize", "output_key", "l2_normalize",
                    "interpolation", "out", "trust_model")
"""The parameters of the options that describe a --model."""


def _model_options(command):
    """Which model to score, on which device, in which precision and layout: a trained run (--checkpoint,
    --runs) or any other model (--model and its input convention). The command receives ``load_model``, which
    loads it."""
    @functools.wraps(command)
    def with_model(**params):
        chosen = {name: params.pop(name) for name in ("checkpoint", "runs", "device", "amp", "memory_format",
                                                      "model", *_EXTERNAL_PARAMS)}
        return command(load_model=functools.partial(_load_model, **chosen), **params)

    return options(
        click.option("--checkpoint", type=click.Path(path_type=Path), default=None, metavar="RUN",
                     help="Run folder (its best checkpoint) or a checkpoint file; default: the latest run."),
        click.option("--runs", type=PATH_DIR, default=None,
                     help="Runs folder whose latest run is the default (default ./runs)."),
        DEVICE_OPTION,
        AMP_OPTION,
        MEMORY_FORMAT_OPTION,
        click.option("--model", default=None, metavar="SPEC",
                     help="A model bgbias did not train, instead of a run: a TorchScript file (checked "
                          "first: tensor operators only), an ONNX file (run by onnxruntime), or a factory "
                          "package.module:callable returning a torch.nn.Module (e.g. "
                          "torchvision.models:resnet50), which is imported and called: it runs as any Python "
                          "code does, so name only packages you trust."),
        TRUST_MODEL_OPTION,
        click.option("--model-arg", "model_args", multiple=True, metavar="KEY=VALUE",
                     help="A keyword argument of the --model factory (repeatable)."),
        click.option("--input-size", type=option_type(rules.PIXELS), default=None,
                     help="--model: side of its square input (default: the dataset's evaluation crop)."),
        click.option("--resize", type=option_type(rules.PIXELS), default=None,
                     help="--model: shorter side before the centre crop (default: the dataset's, scaled "
                          "with --input-size)."),
        click.option("--normalize", default="imagenet", show_default=True,
                     help="--model: imagenet, clip, none (RGB in [0, 1]) or MEAN,STD (two or six numbers)."),
        click.option("--interpolation", type=option_type(rules.INTERPOLATION), default="bilinear",
                     show_default=True,
                     help="--model: the filter that resizes its images (its own preprocessing's: timm and "
                          "many torchvision weights use bicubic)."),
        click.option("--output-key", default=None,
                     help="--model: the entry (dict key, or tuple position) of its output that holds the "
                          "embeddings."),
        click.option("--l2-normalize/--no-l2-normalize", default=True, show_default=True,
                     help="--model: scale each embedding to unit length (rank by cosine similarity)."),
        click.option("--out", type=PATH_DIR, default=None,
                     help="--model: folder for its reports (default runs/external/<name>-<digests>)."),
    )(with_model)


def _load_model(checkpoint: Path | None, runs: Path | None, device: str, amp: str | None,
                memory_format: str | None, model: str | None, **external):
    """The run ``checkpoint`` (default: the latest of ``runs``), or the external ``model`` read as the
    ``external`` options state (printed, defaults included), in precision ``amp`` and layout
    ``memory_format`` (None: the model's default)."""
    from bgbias.engine.trained import load_trained

    given = given_options(click.get_current_context(), _EXTERNAL_PARAMS)
    if model is None:
        if given:
            raise OptionError(f"{', '.join(given)} describe a model given with --model",
                              fix="add --model SPEC, or drop them to score a run")
        return load_trained(checkpoint, device=device, runs=runs, amp=amp, memory_format=memory_format)
    if checkpoint is not None or runs is not None:
        raise OptionError("--model names a model of its own; --checkpoint and --runs name a run",
                          fix="pass either --model or --checkpoint/--runs")
    from bgbias.engine.device import memory_format_name, precision_name
    from bgbias.engine.external_model import load_external_model
    from bgbias.engine.model_spec import parse_model_args
    from bgbias.models.model_input import ARGUMENTS, ModelInput

    model_input = ModelInput(**{name: external[name] for name in ARGUMENTS.declared})
    loaded = load_external_model(model, model_input, args=parse_model_args(external["model_args"]),
                                 device=device, out=external["out"], trust=external["trust_model"], amp=amp,
                                 memory_format=memory_format)
    click.echo(f"model: {loaded.network.kind} {loaded.network.spec}; reports in {loaded.home}", err=True)
    click.echo(model_input.describe(), err=True)
    click.echo(f"computed in {precision_name(loaded.amp)}, {memory_format_name(loaded.memory_format)} "
               "(--amp, --memory-format)", err=True)
    return loaded


@click.command("eval")
@_model_options
@dataset_options("Dataset to evaluate on (default: the run's; a --model needs it).", required=False)
@click.option("--split", type=option_type(rules.CHOSEN_SPLIT), default=None,
              help="Split to score (default: all for a --model on one's own folder or table, which bgbias "
                   "did not train; else test). The report says which and why.")
@click.option("--corrupted", is_flag=True, help="Also score background-replaced repeats of the split.")
@click.option("--repeats", type=option_type(rules.REPEATS), default=5, show_default=True,
              help="Corrupted repeats (each a fixed manifest).")
@click.option("--seed", type=option_type(rules.SEED), default=0, show_default=True,
              help="Seed of the corrupted sets (the same for every model).")
@click.option("--masks", type=PATH_DIR, default=None, help="Saliency masks (default masks/<dataset>).")
@click.option("--compare-masks", type=PATH_DIR, default=None, metavar="DIRECTORY",
              help="A second source's masks (e.g. masks/<dataset>-ground-truth): the corrupted repeats cut "
                   "out with them too, on the same backgrounds, and the report's mask sensitivity (the "
                   "paired difference and the masks' IoU).")
@click.option("--backgrounds", type=PATH_DIR, default=None,
              help="Background pools: a folder with test/ (default ./backgrounds).")
@click.option("--manifests", type=PATH_DIR, default=None,
              help="Folder of the corrupted-set manifests (default corrupted/<dataset>/<split>/seed-<S>).")
@click.option("--shortlist", type=click.IntRange(min=1), default=None,
              help="For a learned distance: rank an L2 shortlist of this many images by it (approximate).")
@click.option("--profile", is_flag=True,
              help="Also the background-reliance profile (implies --corrupted): query-side, worst case, "
                   "only-fg, only-bg, mixed-same/-rand and the BG-gap.")
@click.option("--worst-k", type=option_type(rules.WORST_K), default=10, show_default=True,
              help="Backgrounds per query of the profile's worst case (K embeddings of every image).")
@loader_options
@click.option("--max-memory", type=BYTES, default=None,
              help="Memory the scoring's neighbour lists may take at once, e.g. 512M or 4G (default 1G): a "
                   "larger split is scored in blocks of queries, with the same scores.")
@click.option("--no-progress", is_flag=True, help="No progress bars.")
def evaluate(load_model, dataset_name: str | None, root: Path | None, split: str | None, corrupted: bool,
             repeats: int, seed: int, masks: Path | None, compare_masks: Path | None,
             backgrounds: Path | None, manifests: Path | None, shortlist: int | None, profile: bool,
             worst_k: int, batch_size: int, workers: int | None, max_memory: int | None,
             no_progress: bool) -> None:
    """Clean (and corrupted) MAP@R, R-precision and P@1 of a trained run or any other model (--model); with
    --profile the background-reliance profile too; report files in <run>/eval/ (a --model's in --out)."""
    from bgbias.measurement.request import MeasureRequest
    from bgbias.report.evaluate import evaluate as evaluate_model

    model = load_model()
    request = MeasureRequest(
        dataset=dataset_name, root=root, split=split, masks=masks, compare_masks=compare_masks,
        corrupted=corrupted, repeats=repeats, seed=seed, backgrounds=backgrounds, manifests=manifests,
        shortlist=shortlist, profile=profile, worst_k=worst_k, batch_size=batch_size, workers=workers,
        max_memory=max_memory, progress=not no_progress,
    )
    result = evaluate_model(model, request, log=lambda line: click.echo(line, err=True))
    click.echo(result.summary())


@click.command("explain")
@_model_options
@dataset_options("Dataset to explain (default: the run's; a --model needs it).", required=False)
@click.option("--split", type=option_type(rules.SPLIT), default="test", show_default=True)
@click.option("--limit", type=option_type(rules.COUNT), default=None,
              help="Score this many images spread evenly over the split (default: all).")
@click.option("--attribution", default="smoothgrad", show_default=True,
              help="Attribution method (smoothgrad: the paper's, 25 noisy copies; see `bgbias methods`).")
@click.option("--attribution-option", "attribution_options", multiple=True, metavar="KEY=VALUE",
              help="An option of the attribution, e.g. copies=50 (repeatable; see `bgbias methods`).")
@click.option("--masks", type=PATH_DIR, default=None,
              help="Saliency masks for images without a ground-truth mask (default masks/<dataset>).")
@click.option("--seed", type=option_type(rules.SEED), default=0, show_default=True, help="Seed of the noise.")
@click.option("--batch-size", type=option_type(rules.COUNT), default=None,
              help="Images per attribution pass (default 1 on the CPU, 8 on CUDA).")
@click.option("--gallery", "gallery_count", type=option_type(rules.GALLERY_COUNT), default=16,
              show_default=True,
              help="Images in the heat-map gallery.")
@click.option("--force", is_flag=True, help="Start over where earlier results of other settings are.")
@click.option("--no-progress", is_flag=True, help="No progress bars.")
def explain(load_model, dataset_name: str | None, root: Path | None, split: str, limit: int | None,
            attribution: str, attribution_options: tuple[str, ...], masks: Path | None, seed: int,
            batch_size: int | None, gallery_count: int, force: bool, no_progress: bool) -> None:
    """Attribution maps and the paper's foreground score (how much of them falls on the object), into
    <run>/explain/<dataset>-<split>-<attribution label>/ (--force starts over in that folder only)."""
    from bgbias.attribution.run import explain as explain_model
    from bgbias.measurement.request import MeasureRequest
    from bgbias.methods.attribution import parse_attribution_options

    request = MeasureRequest(
        dataset=dataset_name, root=root, split=split, masks=masks, limit=limit, attribution=attribution,
        attribution_options=parse_attribution_options(attribution, attribution_options),
        attribution_seed=seed, batch_size=batch_size, gallery_count=gallery_count, force=force,
        progress=not no_progress,
    )
    result = explain_model(load_model(), request, log=lambda line: click.echo(line, err=True))
    click.echo(f"scores: {result.scores_csv}")
    if result.gallery is not None:
        click.echo(f"gallery: {result.gallery}")
