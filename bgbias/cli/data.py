"""The commands that check a dataset and prepare what measuring it needs: ``datasets``, ``masks``,
``corrupt``."""

from __future__ import annotations

from pathlib import Path

import click

from bgbias import options as rules
from bgbias.cli.options import PATH_DIR, dataset_options, given_options, option_type, split_options
from bgbias.errors import EXIT_PARTIAL, OptionError


@click.command("datasets")
@dataset_options()
@split_options
def datasets(dataset_name: str, root: Path | None, protocol: str, fold: int) -> None:
    """Check a dataset's layout and print its splits (classes and images per split)."""
    from bgbias.data.registry import open_dataset, summarize
    from bgbias.report.console import format_dataset_summary

    click.echo(format_dataset_summary(summarize(open_dataset(dataset_name, root), protocol, fold)))


def _parse_shard(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[int, int]:
    index, _, count = value.partition("/")
    if not (index.isdigit() and count.isdigit()) or not 0 <= int(index) < int(count):
        raise click.BadParameter(f"expected i/n with 0 <= i < n (e.g. 0/4), got {value!r}")
    return int(index), int(count)


@click.command(
    "masks",
    epilog=f"Exit status: 0 when every image has its mask; 2 on an error, shown with its fix; {EXIT_PARTIAL} "
    "when the run finished but some images failed: they are listed, and every failure is in the manifest "
    "with its reason and fix. Other runs may work on other shards of the same --out at the same time, not "
    "on the same one.",
)
@dataset_options()
@click.option("--out", type=PATH_DIR, default=None,
              help="Output folder (default masks/<dataset key> for u2netp, where every command looks; "
                   "masks/<dataset key>-<model> for another model). The key is the dataset's name, or for a "
                   "dataset outside its usual folder, <name>-<folder>-<digest of its path>.")
@click.option(
    "--model",
    default=rules.DEFAULT_MASK_MODEL,
    show_default=True,
    help="rembg model: u2netp (U²-Net's small model, fetched by `bgbias assets fetch`), u2net (the paper's, "
         "176 MB: `bgbias assets fetch --u2net`), isnet-general-use, birefnet-general, ...; or ground-truth: "
         "the masks the dataset ships (the bench's exact ones).",
)
@click.option(
    "--backend",
    type=option_type(rules.MASK_BACKEND),
    default="auto",
    show_default=True,
    help="torch: bgbias's own U²-Net (u2net, u2netp, u2net_human_seg), batched, on the CPU or CUDA; "
         "onnxruntime: the model file, one image per call, rembg's masks byte for byte. auto: the backend of "
         "the masks already in the output folder, else torch on CUDA, onnxruntime on the CPU (faster there).",
)
@click.option(
    "--device",
    type=option_type(rules.MASK_DEVICE),
    default="auto",
    show_default=True,
    help="auto uses CUDA where the backend can (torch: when torch sees a GPU; onnxruntime: with "
         "onnxruntime-gpu).",
)
@click.option(
    "--amp",
    type=option_type(rules.AMP),
    default="auto",
    show_default=True,
    help="torch on CUDA: autocast the network to bf16 or fp16; off and auto compute in float32 (auto: "
         "the folder's, if its masks were made otherwise).",
)
@click.option(
    "--batch-size",
    type=option_type(rules.COUNT),
    default=None,
    help="Images per network call (torch; default 32 on CUDA, 1 on the CPU, where larger batches were "
         "slower).",
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
    help="Network calls at once (default: one per core on the CPU, at most 4; one on a GPU).",
)
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="CPU threads of each network call (default: the cores shared out among the streams).")
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
    backend: str,
    device: str,
    amp: str,
    batch_size: int | None,
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
    from bgbias.saliency.sessions import Inference

    network = ("backend", "device", "amp", "batch_size", "shard", "streams", "threads", "empty_below")
    if model == GROUND_TRUTH and (given := given_options(click.get_current_context(), network)):
        raise OptionError(f"{', '.join(given)} and --model ground-truth together",
                          fix="leave them out: the dataset's own masks are copied, all of them, without a "
                              "network")
    dataset = open_dataset(dataset_name, root)
    if model == GROUND_TRUTH:
        copied = copy_ground_truth_masks(dataset.items(), out or default_ground_truth_dir(dataset))
        click.echo(copied.describe())
        click.echo(f"use them with --masks {copied.out_dir}")
        return
    out_dir = out if out is not None else default_masks_dir(dataset, model)
    run = make_masks(
        dataset.items(),
        out_dir,
        model=model,
        inference=Inference(backend=backend, device=device, amp=amp, batch=batch_size, streams=streams,
                            threads=threads),
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


@click.command("corrupt")
@dataset_options()
@click.option(
    "--split",
    type=option_type(rules.SPLIT),
    default="test",
    show_default=True,
    help="test draws from the test pool, val from the train pool (as in the paper's code); all (every "
         "image of the dataset) from the test pool.",
)
@split_options
@click.option("--repeats", type=option_type(rules.REPEATS), default=5, show_default=True)
@click.option("--seed", type=option_type(rules.SEED), default=0, show_default=True)
@click.option(
    "--backgrounds",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Folder with train/ and test/ pools, or one pool folder (default ./backgrounds).",
)
@click.option(
    "--out",
    type=PATH_DIR,
    default=None,
    help="Manifest folder (default corrupted/<dataset>/<split>/seed-<S>).",
)
@click.option(
    "--render",
    type=PATH_DIR,
    default=None,
    help="Also write the corrupted images and a gallery.png into this folder.",
)
@click.option(
    "--masks",
    "masks_dir",
    type=PATH_DIR,
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
    help="Sets to make (repeatable): random-bg (the paper's, the default), repasted (the paste "
         "control), only-fg, only-bg-tiled, only-bg-black, only-bg-inpainted, mixed-same, mixed-rand (the "
         "profile's, in <out>/<variant>/), or all.",
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
    from bgbias.data.items import default_masks_dir
    from bgbias.data.registry import open_dataset
    from bgbias.variants.render_variants import render_sets
    from bgbias.variants.variant_manifests import PAPER_SET, make_sets

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
