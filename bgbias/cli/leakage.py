"""``bgbias leakage``: how much of the class a dataset's backgrounds give away, before any model is trained on
it (docs/leakage.md)."""

from __future__ import annotations

from pathlib import Path

import click

from bgbias import options as rules
from bgbias.cli.options import PATH_DIR, compute_options, dataset_options, loader_options, option_type


@click.command("leakage")
@dataset_options("Dataset to measure.")
@click.option("--split", type=option_type(rules.LEAKAGE_SPLIT), default="test", show_default=True)
@click.option("--masks", type=PATH_DIR, default=None, help="Saliency masks (default masks/<dataset>).")
@click.option("--fill", type=option_type(rules.FILL), default="inpainted", show_default=True,
              help="How the object's hole is filled in the background-only images: black keeps its "
                   "silhouette (a shape leak); tiled and inpainted hide it.")
@click.option("--model", default=None, metavar="SPEC",
              help="The frozen encoder: a run folder, a TorchScript or ONNX file, or a factory "
                   "package.module:callable (default: the offline ImageNet MobileNetV2, "
                   "bgbias.models.pretrained:imagenet_mobilenet_v2).")
@compute_options
@click.option("--seed", type=option_type(rules.SEED), default=0, show_default=True,
              help="Seed of the probe's folds and of the bootstrap.")
@loader_options
@click.option("--out", type=PATH_DIR, default=None,
              help="Folder for leakage.json, leakage.md and leakage-classes.png, the picture of the classes "
                   "whose background gives them away most (default: print the summary only).")
@click.option("--no-progress", is_flag=True, help="No progress bars.")
def leakage(dataset_name: str, root: Path | None, split: str, masks: Path | None, fill: str,
            model: str | None, trust_model: bool, device: str, amp: str | None, memory_format: str | None,
            seed: int, batch_size: int, workers: int | None, out: Path | None, no_progress: bool) -> None:
    """The background leakage of a dataset's split: how well the class is retrieved and probed from the
    background alone and from the object alone, seen by a frozen encoder, and the background's share of it,
    with a bootstrap interval and the classes whose background gives them away most."""
    from bgbias.api import as_embedding_model
    from bgbias.data.registry import open_dataset
    from bgbias.leakage_meter.class_gallery import CLASS_GALLERY
    from bgbias.leakage_meter.meter import DEFAULT_ENCODER, measure_leakage

    dataset = open_dataset(dataset_name, root)
    encoder = as_embedding_model(model or DEFAULT_ENCODER, device=device, trust_model=trust_model, amp=amp,
                                 memory_format=memory_format)
    result = measure_leakage(dataset, encoder, split=split, masks_dir=masks, fill=fill, seed=seed,
                             batch_size=batch_size, workers=workers, progress=not no_progress, out=out)
    click.echo(result.markdown(), nl=False)
    if out is not None:
        picture = f", {out / CLASS_GALLERY}" if result.per_class else ""
        click.echo(f"written: {out / 'leakage.json'}, {out / 'leakage.md'}{picture}", err=True)
