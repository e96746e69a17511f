"""The ``bgbias`` command line: parses options and calls library functions, nothing more.

Heavy libraries are imported inside the commands, so ``bgbias --help`` answers at once.
"""

from __future__ import annotations

import functools
import os
import warnings
from pathlib import Path

import click

from bgbias import __version__
from bgbias import options as rules
from bgbias.data.registry import dataset_names
from bgbias.errors import EXIT_PARTIAL, BgbiasError, OptionError
from bgbias.signals import Terminated, interruption_status, sigterm_as_interrupt


class _Group(click.Group):
    """A click group that prints a :class:`BgbiasError` as a short message (file + fix), exit status 2, and
    warnings of the library (skipped files, say) as one ``warning:`` line each instead of Python's format.
    SIGTERM is taken like Ctrl-C (:mod:`bgbias.signals`): either ends the command with one line, status 143
    or 130, after the run or job said in its records that it was interrupted."""

    def invoke(self, ctx: click.Context):
        try:
            with warnings.catch_warnings(), sigterm_as_interrupt():
                warnings.showwarning = _show_warning
                return super().invoke(ctx)
        except BgbiasError as err:
            _fail(ctx, err)
        except KeyboardInterrupt as stop:
            cause = "SIGTERM" if isinstance(stop, Terminated) else "Ctrl-C"
            click.secho(f"\ninterrupted by {cause}: what was finished is kept, and running the command again "
                        "resumes (a training: bgbias train --resume RUN)", err=True, fg="yellow")
            ctx.exit(interruption_status(stop))
        except OSError as err:
            # The library reports what it writes itself; anything else the system refused names its file here.
            if err.filename is None:
                raise
            _fail(ctx, BgbiasError(f"the system refused: {err.strerror or err}", path=err.filename,
                                   fix="check that the path exists and that you may read it (an input) or "
                                       "write it (an output)"))


def _fail(ctx: click.Context, err: BgbiasError) -> None:
    click.secho(f"error: {err.render()}", err=True, fg="red")
    ctx.exit(2)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    click.secho(f"warning: {message}", err=True, fg="yellow")


_PATH_DIR = click.Path(file_okay=False, path_type=Path)


def _typed(rule: rules.Rule) -> click.ParamType:
    """The click type of an option declared as a :class:`~bgbias.options.Rule`, which the Python API checks
    its argument of the same name against: one declaration for both."""
    if rule.choices:
        return click.Choice(rule.choices)
    if rule.kind in (int, float):
        kind = click.IntRange if rule.kind is int else click.FloatRange
        return kind(min=rule.minimum, max=rule.maximum)
    return {bool: click.BOOL, str: click.STRING, Path: click.Path(path_type=Path)}[rule.kind]
_DATASETS = dataset_names()  # the layout modules are light: no numpy, PIL or torch


def _dataset_options(command):
    """--dataset and --root, shared by every command that reads a dataset."""
    command = click.option(
        "--root",
        type=click.Path(path_type=Path),
        default=None,
        help="Dataset folder (default: <data-root>/<the dataset's usual folder name>).",
    )(command)
    choice = click.Choice(_DATASETS)
    return click.option("--dataset", "dataset_name", required=True, type=choice, help="Dataset layout.")(
        command
    )


def _split_options(command):
    """--protocol and --fold: the fixed split of the paper, or one fold of 4-fold cross-validation."""
    command = click.option("--fold", type=_typed(rules.FOLD), default=0, show_default=True,
                           help="cv4 fold.")(command)
    return click.option("--protocol", type=_typed(rules.PROTOCOL), default="fixed",
                        show_default=True)(command)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="bgbias")
@click.option(
    "--data-root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder holding the datasets (default $BGBIAS_DATA, else ./data).",
)
def main(data_root: Path | None) -> None:
    """Measure how much a deep metric learning model relies on backgrounds, and train it to rely less."""
    if data_root is not None:
        # Through the environment, so worker processes resolve dataset paths the same way.
        os.environ["BGBIAS_DATA"] = str(data_root)


# --------------------------------------------------------------------------------------------------- assets
@main.group(cls=_Group)
def assets() -> None:
    """Offline provisioning: model weights, Tux Paint stamps, background photos, pools and the bench."""


@assets.command("fetch")
@click.argument("names", nargs=-1)
@click.option(
    "--u2net", "with_u2net", is_flag=True, help="Also fetch the full U²-Net (176 MB), the paper's mask model."
)
@click.option(
    "--from",
    "from_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Take archives (.whl/.deb) or weight files from DIR instead of downloading them.",
)
@click.option("--force", is_flag=True, help="Fetch again even when a verified copy is present.")
def assets_fetch(names: tuple[str, ...], with_u2net: bool, from_dir: Path | None, force: bool) -> None:
    """Fetch NAMES (default: all but the full U²-Net) into $BGBIAS_HOME and verify their checksums."""
    from bgbias.assets.catalog import DEFAULT_ASSETS
    from bgbias.assets.fetch import fetch

    wanted = list(names) or list(DEFAULT_ASSETS)
    if with_u2net and "u2net" not in wanted:
        wanted.append("u2net")
    _print_status(fetch(wanted, from_dir=from_dir, force=force))


@assets.command("status")
@click.option("--verify", is_flag=True, help="Recompute every checksum, not just sizes.")
def assets_status(verify: bool) -> None:
    """Show which assets are present, where, and whether their checksums match."""
    from bgbias.assets.store import status

    _print_status(status(verify=verify))


def _print_status(rows) -> None:
    from bgbias.report.console import format_asset_status

    click.echo(format_asset_status(rows))


@assets.command("backgrounds")
@click.option("--out", type=_PATH_DIR, default=None, help="Pool folder to complete (default ./backgrounds).")
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of crops and generated images (the committed pools use 0).",
)
def assets_backgrounds(out: Path | None, seed: int) -> None:
    """Build the train/ and test/ background pools (100 images each) from the fetched photos."""
    from bgbias.paths import backgrounds_root
    from bgbias.report.console import format_pools_summary
    from bgbias.study import prepare_pools

    click.echo(format_pools_summary(prepare_pools(out, seed=seed), str(out or backgrounds_root())))


def _bench_options(command, prefix: str = ""):
    """The bench's size preset, ρ and seed: ``--preset``, ``--rho``, ``--seed`` for `assets bench`;
    ``--bench-preset``, ``--rho``, ``--bench-seed`` for `study`, whose ``--preset`` and ``--seeds`` are the
    study's own."""
    command = click.option(
        f"--{prefix}seed",
        "bench_seed",
        type=click.IntRange(min=0),
        default=0,
        show_default=True,
        help="Seed of the bench's class split and views.",
    )(command)
    command = click.option(
        "--rho",
        type=click.FloatRange(0.0, 1.0),
        default=0.9,
        show_default=True,
        help="Share of a class's views that show the class's home background.",
    )(command)
    return click.option(
        f"--{prefix}preset",
        "bench_preset",
        type=click.Choice(["small", "large"]),
        default="small",
        show_default=True,
        help="small: 8 views of 128 px per class; large: 16 views of 224 px.",
    )(command)


def _study_bench_options(command):
    return _bench_options(command, prefix="bench-")


@assets.command("bench")
@click.option("--out", type=_PATH_DIR, default=None, help="Output folder (default <data-root>/bench).")
@_bench_options
def assets_bench(out: Path | None, bench_preset: str, rho: float, bench_seed: int) -> None:
    """Build the bench: Tux Paint photo stamps on real background photos, with exact masks."""
    from bgbias.report.console import format_bench_summary
    from bgbias.study import prepare_bench

    click.echo(format_bench_summary(prepare_bench(out, preset=bench_preset, rho=rho, seed=bench_seed)))


# --------------------------------------------------------------------------------------------------- datasets
@main.command("datasets")
@_dataset_options
@_split_options
def datasets(dataset_name: str, root: Path | None, protocol: str, fold: int) -> None:
    """Check a dataset's layout and print its splits (classes and images per split)."""
    from bgbias.data.registry import open_dataset, summarize
    from bgbias.report.console import format_dataset_summary

    click.echo(format_dataset_summary(summarize(open_dataset(dataset_name, root), protocol, fold)))


# --------------------------------------------------------------------------------------------------- masks
def _parse_shard(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[int, int]:
    index, _, count = value.partition("/")
    if not (index.isdigit() and count.isdigit()) or not 0 <= int(index) < int(count):
        raise click.BadParameter(f"expected i/n with 0 <= i < n (e.g. 0/4), got {value!r}")
    return int(index), int(count)


@main.command(
    "masks",
    epilog=f"Exit status: 0 when every image has its mask; 2 on an error, shown with its fix; {EXIT_PARTIAL} "
    "when the run finished but some images failed: they are listed, and every failure is in the manifest "
    "with its reason and fix. Other runs may work on other shards of the same --out at the same time, not "
    "on the same one.",
)
@_dataset_options
@click.option("--out", type=_PATH_DIR, default=None, help="Output folder (default masks/<dataset>).")
@click.option(
    "--model",
    default="u2net",
    show_default=True,
    help="rembg model: u2net (the paper's), u2netp (fast), isnet-general-use, birefnet-general, ...; or "
         "ground-truth: the masks the dataset ships (the bench's exact ones), into <out> (default "
         "masks/<dataset>-ground-truth).",
)
@click.option(
    "--device",
    type=_typed(rules.MASK_DEVICE),
    default="auto",
    show_default=True,
    help="auto uses CUDA when onnxruntime offers it.",
)
@click.option(
    "--shard",
    default="0/1",
    show_default=True,
    callback=_parse_shard,
    help="Take shard i of n (every n-th image), so several machines can split a dataset.",
)
@click.option(
    "--streams",
    type=click.IntRange(min=1),
    default=None,
    help="Images in the network at once (default: one per core on CPU, at most 4).",
)
@click.option("--threads", type=click.IntRange(min=1), default=None, help="onnxruntime threads per stream.")
@click.option(
    "--empty-below",
    type=click.FloatRange(0.0, 1.0),
    default=0.5,
    show_default=True,
    help="Flag a mask as likely empty when the network's raw maximum is below this.",
)
def masks(
    dataset_name: str,
    root: Path | None,
    out: Path | None,
    model: str,
    device: str,
    shard: tuple[int, int],
    streams: int | None,
    threads: int | None,
    empty_below: float,
) -> None:
    """U²-Net salient-object masks for every image; resumable, with failures and mask quality recorded.
    --model ground-truth lays out the masks the dataset ships instead (the bench's exact ones)."""
    from bgbias.data.items import default_masks_dir
    from bgbias.data.registry import open_dataset
    from bgbias.saliency.ground_truth import GROUND_TRUTH, copy_ground_truth_masks, default_ground_truth_dir
    from bgbias.saliency.pipeline import make_masks

    dataset = open_dataset(dataset_name, root)
    if model == GROUND_TRUTH:
        copied = copy_ground_truth_masks(dataset.items(), out or default_ground_truth_dir(dataset))
        click.echo(copied.describe())
        click.echo(f"use them with --masks {copied.out_dir}")
        return
    out_dir = out if out is not None else default_masks_dir(dataset)
    run = make_masks(
        dataset.items(),
        out_dir,
        model=model,
        device=device,
        streams=streams,
        threads=threads,
        shard=shard,
        empty_below=empty_below,
    )
    click.echo(run.describe())
    if run.quality is not None:
        click.echo(run.quality.describe())
    click.echo(f"manifest: {run.manifest}")
    if run.failures:
        click.secho(f"error: {run.describe_failures()}", err=True, fg="red")
        click.get_current_context().exit(EXIT_PARTIAL)


# --------------------------------------------------------------------------------------------------- corrupt
@main.command("corrupt")
@_dataset_options
@click.option(
    "--split",
    type=_typed(rules.SPLIT),
    default="test",
    show_default=True,
    help="test draws from the test pool, val from the train pool (as in the paper's code).",
)
@_split_options
@click.option("--repeats", type=_typed(rules.REPEATS), default=5, show_default=True)
@click.option("--seed", type=_typed(rules.SEED), default=0, show_default=True)
@click.option(
    "--backgrounds",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Folder with train/ and test/ pools, or one pool folder (default ./backgrounds).",
)
@click.option(
    "--out",
    type=_PATH_DIR,
    default=None,
    help="Manifest folder (default corrupted/<dataset>/<split>/seed-<S>).",
)
@click.option(
    "--render",
    type=_PATH_DIR,
    default=None,
    help="Also write the corrupted images and a gallery.png into this folder.",
)
@click.option(
    "--masks",
    "masks_dir",
    type=_PATH_DIR,
    default=None,
    help="U²-Net masks for --render (default masks/<dataset>).",
)
@click.option(
    "--force",
    is_flag=True,
    help="With --render: render every image again, also into a folder that holds another render.",
)
@click.option(
    "--variant",
    "variants",
    multiple=True,
    metavar="NAME",
    help="Sets to make (repeatable): random-bg (the paper's, the default), only-fg, only-bg-tiled, "
         "only-bg-black, mixed-same, mixed-rand (the profile's, in <out>/<variant>/), or all.",
)
def corrupt(
    dataset_name: str,
    root: Path | None,
    split: str,
    protocol: str,
    fold: int,
    repeats: int,
    seed: int,
    backgrounds: Path | None,
    out: Path | None,
    render: Path | None,
    masks_dir: Path | None,
    force: bool,
    variants: tuple[str, ...],
) -> None:
    """Fix corrupted (background-replaced) versions of a split: one seeded manifest per repeat; --variant
    makes the profile's variants of it too."""
    from bgbias.augment.render_variants import render_sets
    from bgbias.augment.variant_manifests import PAPER_SET, make_sets
    from bgbias.data.items import default_masks_dir
    from bgbias.data.registry import open_dataset

    if force and render is None:
        raise OptionError("--force renders images again; without --render nothing is rendered",
                          fix="add --render DIR, or drop --force")
    dataset = open_dataset(dataset_name, root)
    made = make_sets(dataset, variants or [PAPER_SET], split, repeats, seed, backgrounds, out, protocol, fold)
    for paths in made.values():
        click.echo(f"{len(paths)} manifest(s) in {paths[0].parent}")
    if render is not None:
        masks = masks_dir if masks_dir is not None else default_masks_dir(dataset)
        for results, gallery in render_sets(dataset, made, masks, render, backgrounds, force):
            written, kept = sum(r.written for r in results), sum(r.kept for r in results)
            click.echo(f"corrupted images in {render} ({written} rendered, {kept} unchanged and kept); "
                       f"look at {gallery}")


# --------------------------------------------------------------------------------------------------- train
@main.command("train")
@click.option("--method", default="multi_similarity", show_default=True, help="See `bgbias methods`.")
@click.option(
    "--dataset", "dataset_name", type=click.Choice(_DATASETS), default="bench", show_default=True,
    help="Dataset to train on.",
)
@click.option("--root", type=click.Path(path_type=Path), default=None, help="Dataset folder.")
@_split_options
@click.option("--bgaugment", is_flag=True, help="Composite training images onto train-pool backgrounds.")
@click.option("--backbone", default=None, help="Backbone (default: the protocol's; see `bgbias methods`).")
@click.option("--weights", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="ImageNet weight file for the backbone (for machines without internet).")
@click.option("--epochs", type=click.IntRange(min=1), default=None, help="Epochs (default: the protocol's).")
@click.option("--seed", type=click.IntRange(min=0), default=None, help="Seed of the run (default 0).")
@click.option("--device", default=None, help="auto (CUDA when present), cpu, cuda or cuda:N.")
@click.option("--workers", type=click.IntRange(min=0), default=None, help="Data loader worker processes.")
@click.option("--masks", type=_PATH_DIR, default=None, help="Saliency masks (default masks/<dataset>).")
@click.option("--backgrounds", type=_PATH_DIR, default=None,
              help="Background pools: a folder with train/ (default ./backgrounds).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="JSON file with settings (the layout of a run's config.json).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override one setting, e.g. --set optim.lr_head=0.001 (repeatable).")
@click.option("--run-dir", type=_PATH_DIR, default=None, help="Folder of this run (default runs/<name>).")
@click.option("--resume", type=_PATH_DIR, default=None,
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
        given = [name for name, value in ctx.params.items()
                 if name not in ("resume", "no_progress")
                 and ctx.get_parameter_source(name) != click.core.ParameterSource.DEFAULT]
        if given:
            raise OptionError(f"--resume continues a run with its saved settings; remove {', '.join(given)}",
                              fix="pass only --resume RUN (and --no-progress)")
        result = resume_training(resume, progress=not no_progress)
    else:
        from bgbias.engine.config import resolve_config
        from bgbias.engine.training import train as train_run

        options = {
            "root": str(root) if root else None, "protocol": protocol, "fold": fold,
            "bgaugment.enabled": bgaugment or None, "model.backbone": backbone,
            "model.weights": str(weights) if weights else None, "schedule.epochs": epochs, "seed": seed,
            "device": device, "data.workers": workers, "bgaugment.masks": str(masks) if masks else None,
            "bgaugment.backgrounds": str(backgrounds) if backgrounds else None,
        }
        config = resolve_config(
            method, dataset_name, config_file=config_file,
            options={key: value for key, value in options.items() if value is not None}, overrides=overrides,
        )
        result = train_run(config, run_dir=run_dir, progress=not no_progress)
    click.echo(format_training_summary(result))


# ---------------------------------------------------------------------------------------------------- eval
_EXTERNAL_PARAMS = {
    "model_args": "--model-arg", "input_size": "--input-size", "resize": "--resize",
    "normalize": "--normalize", "output_key": "--output-key", "l2_normalize": "--l2-normalize",
    "out": "--out", "trust_model": "--trust-model",
}
"""The options that describe a --model, by parameter name."""


def _model_options(command):
    """Which model to score, on which device: a trained run (--checkpoint, --runs) or any other model
    (--model and its input convention). The command receives ``load_model``, which loads it."""
    @functools.wraps(command)
    def with_model(**params):
        chosen = {name: params.pop(name) for name in ("checkpoint", "runs", "device", "model",
                                                      *_EXTERNAL_PARAMS)}
        return command(load_model=functools.partial(_load_model, **chosen), **params)

    options = [
        click.option("--checkpoint", type=click.Path(path_type=Path), default=None, metavar="RUN",
                     help="Run folder (its best checkpoint) or a checkpoint file; default: the latest run."),
        click.option("--runs", type=_PATH_DIR, default=None,
                     help="Runs folder whose latest run is the default (default ./runs)."),
        click.option("--device", default="auto", show_default=True,
                     help="auto (CUDA when present), cpu, cuda or cuda:N."),
        click.option("--model", default=None, metavar="SPEC",
                     help="A model bgbias did not train, instead of a run: a TorchScript file (checked "
                          "first: tensor operators only), an ONNX file (run by onnxruntime), or a factory "
                          "package.module:callable returning a torch.nn.Module (e.g. "
                          "torchvision.models:resnet50), which is imported and called: it runs as any Python "
                          "code does, so name only packages you trust."),
        click.option("--trust-model", is_flag=True,
                     help="--model: run a TorchScript file unchecked (one you made or trust as you would its "
                          "author's Python code): its code may then read and write files."),
        click.option("--model-arg", "model_args", multiple=True, metavar="KEY=VALUE",
                     help="A keyword argument of the --model factory (repeatable)."),
        click.option("--input-size", type=_typed(rules.PIXELS), default=None,
                     help="--model: side of its square input (default: the dataset's evaluation crop)."),
        click.option("--resize", type=_typed(rules.PIXELS), default=None,
                     help="--model: shorter side before the centre crop (default: the dataset's, scaled "
                          "with --input-size)."),
        click.option("--normalize", default="imagenet", show_default=True,
                     help="--model: imagenet, clip, none (RGB in [0, 1]) or MEAN,STD (two or six numbers)."),
        click.option("--output-key", default=None,
                     help="--model: the entry (dict key, or tuple position) of its output that holds the "
                          "embeddings."),
        click.option("--l2-normalize/--no-l2-normalize", default=True, show_default=True,
                     help="--model: scale each embedding to unit length (rank by cosine similarity)."),
        click.option("--out", type=_PATH_DIR, default=None,
                     help="--model: folder for its reports (default runs/external/<name>-<digests>)."),
    ]
    for option in reversed(options):
        with_model = option(with_model)
    return with_model


def _load_model(checkpoint: Path | None, runs: Path | None, device: str, model: str | None, **external):
    """The run ``checkpoint`` (default: the latest of ``runs``), or the external ``model`` read as the
    ``external`` options state (printed, defaults included)."""
    from bgbias.engine.trained import load_trained

    ctx = click.get_current_context()
    given = [option for name, option in _EXTERNAL_PARAMS.items()
             if ctx.get_parameter_source(name) != click.core.ParameterSource.DEFAULT]
    if model is None:
        if given:
            raise OptionError(f"{', '.join(given)} describe a model given with --model",
                              fix="add --model SPEC, or drop them to score a run")
        return load_trained(checkpoint, device=device, runs=runs)
    if checkpoint is not None or runs is not None:
        raise OptionError("--model names a model of its own; --checkpoint and --runs name a run",
                          fix="pass either --model or --checkpoint/--runs")
    from bgbias.engine.external_model import load_external_model
    from bgbias.engine.model_spec import parse_model_args
    from bgbias.models.model_input import RULES, ModelInput, check_model_input

    convention = {name: external[name] for name in RULES}
    check_model_input(convention, _EXTERNAL_PARAMS)  # the API's checks, naming the options
    model_input = ModelInput(**convention)
    loaded = load_external_model(model, model_input, args=parse_model_args(external["model_args"]),
                                 device=device, out=external["out"], trust=external["trust_model"])
    click.echo(f"model: {loaded.network.kind} {loaded.network.spec}; reports in {loaded.home}", err=True)
    click.echo(model_input.describe(), err=True)
    return loaded


@main.command("eval")
@_model_options
@click.option("--dataset", "dataset_name", type=click.Choice(_DATASETS), default=None,
              help="Dataset to evaluate on (default: the run's; a --model needs it).")
@click.option("--root", type=click.Path(path_type=Path), default=None, help="Dataset folder.")
@click.option("--split", type=_typed(rules.SPLIT), default="test", show_default=True)
@click.option("--corrupted", is_flag=True, help="Also score background-replaced repeats of the split.")
@click.option("--repeats", type=_typed(rules.REPEATS), default=5, show_default=True,
              help="Corrupted repeats (each a fixed manifest).")
@click.option("--seed", type=_typed(rules.SEED), default=0, show_default=True,
              help="Seed of the corrupted sets (the same for every model).")
@click.option("--masks", type=_PATH_DIR, default=None, help="Saliency masks (default masks/<dataset>).")
@click.option("--backgrounds", type=_PATH_DIR, default=None,
              help="Background pools: a folder with test/ (default ./backgrounds).")
@click.option("--manifests", type=_PATH_DIR, default=None,
              help="Folder of the corrupted-set manifests (default corrupted/<dataset>/<split>/seed-<S>).")
@click.option("--shortlist", type=click.IntRange(min=1), default=None,
              help="For a learned distance: rank an L2 shortlist of this many images by it (approximate).")
@click.option("--profile", is_flag=True,
              help="Also the background-reliance profile (implies --corrupted): query-side, worst case, "
                   "only-fg, only-bg, mixed-same/-rand and the BG-gap.")
@click.option("--worst-k", type=_typed(rules.WORST_K), default=10, show_default=True,
              help="Backgrounds per query of the profile's worst case (K embeddings of every image).")
@click.option("--batch-size", type=_typed(rules.BATCH_SIZE), default=64, show_default=True)
@click.option("--workers", type=_typed(rules.WORKERS), default=2, show_default=True,
              help="Data loader worker processes.")
@click.option("--no-progress", is_flag=True, help="No progress bars.")
def evaluate(load_model, dataset_name: str | None, root: Path | None, split: str, corrupted: bool,
             repeats: int, seed: int, masks: Path | None, backgrounds: Path | None, manifests: Path | None,
             shortlist: int | None, profile: bool, worst_k: int, batch_size: int, workers: int,
             no_progress: bool) -> None:
    """Clean (and corrupted) MAP@R, R-precision and P@1 of a trained run or any other model (--model); with
    --profile the background-reliance profile too; report files in <run>/eval/ (a --model's in --out)."""
    from bgbias.engine.request import MeasureRequest
    from bgbias.report.evaluate import evaluate as evaluate_model

    model = load_model()
    request = MeasureRequest(
        dataset=dataset_name, root=root, split=split, masks=masks, corrupted=corrupted, repeats=repeats,
        seed=seed, backgrounds=backgrounds, manifests=manifests, shortlist=shortlist, profile=profile,
        worst_k=worst_k, batch_size=batch_size, workers=workers, progress=not no_progress,
    )
    result = evaluate_model(model, request, log=lambda line: click.echo(line, err=True))
    click.echo(result.summary())


@main.command("explain")
@_model_options
@click.option("--dataset", "dataset_name", type=click.Choice(_DATASETS), default=None,
              help="Dataset to explain (default: the run's; a --model needs it).")
@click.option("--root", type=click.Path(path_type=Path), default=None, help="Dataset folder.")
@click.option("--split", type=click.Choice(["test", "val"]), default="test", show_default=True)
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="Score this many images spread evenly over the split (default: all).")
@click.option("--attribution", default="smoothgrad", show_default=True,
              help="Attribution method (smoothgrad: the paper's, 25 noisy copies; see `bgbias methods`).")
@click.option("--attribution-option", "attribution_options", multiple=True, metavar="KEY=VALUE",
              help="An option of the attribution, e.g. copies=50 (repeatable; see `bgbias methods`).")
@click.option("--masks", type=_PATH_DIR, default=None,
              help="Saliency masks for images without a ground-truth mask (default masks/<dataset>).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the noise.")
@click.option("--batch-size", type=click.IntRange(min=1), default=None,
              help="Images per attribution pass (default 1 on the CPU, 8 on CUDA).")
@click.option("--gallery", "gallery_count", type=click.IntRange(min=0), default=16, show_default=True,
              help="Images in the heat-map gallery.")
@click.option("--force", is_flag=True, help="Start over where earlier results of other settings are.")
@click.option("--no-progress", is_flag=True, help="No progress bars.")
def explain(load_model, dataset_name: str | None, root: Path | None, split: str, limit: int | None,
            attribution: str, attribution_options: tuple[str, ...], masks: Path | None, seed: int,
            batch_size: int | None, gallery_count: int, force: bool, no_progress: bool) -> None:
    """Attribution maps and the paper's foreground score (how much of them falls on the object), into
    <run>/explain/<dataset>-<split>-<attribution label>/ (--force starts over in that folder only)."""
    from bgbias.engine.request import MeasureRequest
    from bgbias.explain.run import explain as explain_model
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


@main.command("report")
@click.argument("run_dirs", nargs=-1, type=_PATH_DIR, metavar="RUN...")
@click.option("--split", type=click.Choice(["test", "val"]), default="test", show_default=True)
@click.option("--out", type=_PATH_DIR, default=None,
              help="Folder for table.md/.csv/.json and runs.png (default <runs>/report), replaced whole once "
                   "the report is written: a folder of its own.")
@click.option("--runs", type=_PATH_DIR, default=None,
              help="Without RUN arguments, every evaluated run in this folder and every external model in "
                   "its external/ (default ./runs).")
@click.option("--attribution", "attribution_label", default="smoothgrad", show_default=True,
              help="Whose maps the galleries compare across runs: an attribution label, the end of the "
                   "explain folders' names (e.g. smoothgrad-copies50).")
@click.option("--study", "study_page", is_flag=True,
              help="Runs of several training seeds (e.g. a study on CUB made with bgbias train / eval / "
                   "explain): Table 1 of seed 0, seeds.md, and the study page study.md / study.html.")
@click.option("--title", default=None, help="The study page's title (with --study).")
def report(run_dirs: tuple[Path, ...], split: str, out: Path | None, runs: Path | None,
           attribution_label: str, study_page: bool, title: str | None) -> None:
    """Several evaluated runs in one Table-1-style table: method × clean / corrupted, with and without
    BGAugment, plus foreground scores (one column per attribution) where `bgbias explain` ran. A RUN may also
    be the folder of a model scored with `bgbias eval --model` (one row of its own)."""
    from bgbias.engine.model_folders import evaluated_folders
    from bgbias.paths import runs_root
    from bgbias.report.markdown import table as markdown_table
    from bgbias.report.runs_table import profile_table, report_runs, table_one

    runs = runs if runs is not None else runs_root()
    if not run_dirs:
        run_dirs = tuple(evaluated_folders(runs, split))
        if not run_dirs:
            raise OptionError(f"no run in {runs} has an evaluation report for the {split} split",
                              fix="evaluate runs with `bgbias eval --corrupted`, or name run folders")
    out = out if out is not None else runs / "report"
    if study_page:
        from bgbias.study import report_study

        title = title or f"bgbias study of {len(run_dirs)} runs"
        files = report_study(run_dirs, out, title=title, split=split)
        click.echo(files["study_md"].read_text(encoding="utf-8"))
        click.echo(f"report: {files['study_html']} (one page, pictures included) and {files['study_md']}")
        return
    written = report_runs(run_dirs, out, split, attribution_label)
    click.echo(markdown_table(*table_one(written.reports, written.foreground)))
    profile = profile_table(written.reports)
    if profile[1]:
        click.echo(f"\nbackground-reliance profile (MAP@R, %):\n{markdown_table(*profile)}")
    click.echo(f"\ntable: {written.files['table_md']}; plot: {written.files['runs_png']}")
    for gallery in written.galleries:
        click.echo(f"attribution maps side by side: {gallery}")


@main.command("methods")
def methods() -> None:
    """List the registered methods, backbones and attribution methods (with their options)."""
    from bgbias.methods.attribution import describe_attributions
    from bgbias.methods.registry import describe_methods
    from bgbias.models.registry import backbone_names

    click.echo("methods (options: --set loss.KEY=VALUE; per-dataset values in bgbias/configs/methods/):")
    for name, options in describe_methods():
        click.echo(f"  {name}: {options}")
    click.echo("backbones: " + ", ".join(backbone_names()))
    click.echo("attributions:")
    for name, options, description in describe_attributions():
        click.echo(f"  {name}: {description}")
        click.echo(f"    options (--attribution-option KEY=VALUE): {options or 'none'}")


# --------------------------------------------------------------------------------------------------- study
@main.command(
    "study",
    epilog=f"Exit status: 0 when every run was trained and measured; 2 on an error, shown with its fix; "
    f"{EXIT_PARTIAL} when some runs failed: the study went on with the others, the report leaves the failed "
    "ones out and names them, and the study folder's failures.json has each error and traceback (the next "
    "`bgbias study` tries them again).",
)
@click.option("--preset", type=click.Choice(["quick", "full"]), default="quick", show_default=True,
              help="quick: multi-similarity, one training seed, exact masks (within 15 minutes on 2 CPU "
                   "cores); full: the paper's six baselines and DCML, SAM, MetricFormer and AVSL, three "
                   "seeds, U²-Net masks (hours; resumable).")
@click.option("--methods", default=None,
              help="Comma-separated methods instead of the preset's (see `bgbias methods`).")
@click.option("--seeds", type=click.IntRange(min=1), default=None,
              help="Training seeds 0 … N−1 instead of the preset's.")
@click.option("--masks", "masks", type=click.Choice(["u2netp", "ground-truth"]), default=None,
              help="Masks for BGAugment and the corrupted sets instead of the preset's (quick: the bench's "
                   "exact ones; full: U²-Net's, as on a real dataset).")
@click.option("--dial", is_flag=True,
              help="The bias dial instead: one method (--methods, default multi_similarity) without and with "
                   "BGAugment on the bench rebuilt at rho 0, 0.5, 0.9 and 1, with exact and U²-Net masks "
                   "(--masks: one of them), and the drop plotted against rho.")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="Train every run as a variant of its method: a method option or optimiser setting, e.g. "
                   "--set loss.certainty_min=global (repeatable). The variant's runs and page get folders of "
                   "their own.")
@_study_bench_options
@click.option("--device", default="auto", show_default=True, help="auto (CUDA when present), cpu or cuda.")
@click.pass_context
def study(ctx: click.Context, preset: str, methods: str | None, seeds: int | None, masks: str | None,
          dial: bool, settings: tuple[str, ...], bench_preset: str, rho: float, bench_seed: int,
          device: str) -> None:
    """The main job on the embedded default: the paper's measurement on the bench, from nothing to one report
    page (assets, pools, bench, masks, every planned run trained without and with BGAugment, clean vs
    corrupted MAP@R, foreground scores; study.md and a self-contained study.html with the spread over
    training seeds). Resumable at every step."""
    from bgbias.paths import backgrounds_root
    from bgbias.report.console import format_asset_status, format_bench_summary, format_pools_summary
    from bgbias.study import DIAL_MASKS, run_dial, run_study, study_plan

    chosen = [name.strip() for name in methods.split(",") if name.strip()] if methods else None
    plan = study_plan(preset, chosen, seeds, masks, settings)
    if dial:
        if settings:
            raise OptionError("--set and --dial together",
                              fix="leave --set out: the dial studies a method as configured")
        if ctx.get_parameter_source("rho") != click.core.ParameterSource.DEFAULT:
            raise OptionError("--rho and --dial together", fix="leave --rho out: the dial sets rho itself")
        if len(plan.methods) != 1:
            raise OptionError(f"the dial trains one method, not {len(plan.methods)}",
                              fix="pass --methods NAME with one name (default multi_similarity)")
        dialled = run_dial(method=plan.methods[0], seeds=seeds or 1, masks=[masks] if masks else DIAL_MASKS,
                           bench_preset=bench_preset, bench_seed=bench_seed, device=device, log=click.echo)
        if not dialled.points:
            raise _nothing_measured(dialled.failures)
        click.echo("\n" + dialled.report["dial_md"].read_text(encoding="utf-8"))
        click.echo(f"report: {dialled.report['dial_md']} and {dialled.report['dial_png']}")
        _exit_partial_on(dialled.failures)
        return
    result = run_study(plan=plan, bench_preset=bench_preset, rho=rho, bench_seed=bench_seed, device=device,
                       log=click.echo)
    if not result.runs:
        raise _nothing_measured(result.failures)
    for text in (
        format_asset_status(result.bench.assets),
        format_pools_summary(result.bench.pools, str(backgrounds_root())),
        format_bench_summary(result.bench.bench),
        result.report["table_md"].read_text(encoding="utf-8"),
        result.report["seeds_md"].read_text(encoding="utf-8"),
    ):
        click.echo("\n" + text)
    click.echo(f"report: {result.report['study_html']} (one page, pictures included) and "
               f"{result.report['study_md']}; per-run reports, plots and galleries in each run's eval/ and "
               "explain/ folders")
    _exit_partial_on(result.failures)


def _nothing_measured(failures: dict[str, str]) -> BgbiasError:
    return BgbiasError(f"every run failed ({len(failures)}): {', '.join(failures)}",
                       fix="see failures.json in the study folder for each error, then run the command again")


def _exit_partial_on(failures: dict[str, str]) -> None:
    """List the failed runs and exit with EXIT_PARTIAL, if any failed."""
    if failures:
        click.secho(f"error: {len(failures)} run(s) failed, left out of the report:", err=True, fg="red")
        for name, error in failures.items():
            click.secho(f"  {name}: {error.splitlines()[0]}", err=True, fg="red")
        click.get_current_context().exit(EXIT_PARTIAL)
