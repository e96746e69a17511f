"""``bgbias score``: the report of ``bgbias eval`` from one's own embeddings of the rendered sets
(docs/embeddings.md)."""

from __future__ import annotations

from pathlib import Path

import click

from bgbias import options as rules
from bgbias.cli.options import BYTES, PATH_DIR, dataset_options, option_type, split_options


@click.command("score")
@click.option("--embeddings", "folder", type=click.Path(exists=True, file_okay=False, path_type=Path),
              required=True,
              help="Folder of embeddings: clean.npz, repeat-<r>.npz, <variant>/repeat-<r>.npz (or .npy with "
                   ".ids.txt, or .parquet), rows keyed by image id (docs/embeddings.md).")
@dataset_options()
@click.option("--split", type=option_type(rules.SPLIT), default="test", show_default=True)
@split_options
@click.option("--repeats", type=option_type(rules.REPEATS), default=5, show_default=True,
              help="Corrupted repeats scored (their files repeat-0 … repeat-<n-1>).")
@click.option("--seed", type=option_type(rules.SEED), default=0, show_default=True,
              help="Seed of the corrupted sets the images were rendered from.")
@click.option("--masks", type=PATH_DIR, default=None,
              help="Saliency masks the sets were rendered with (default masks/<dataset>).")
@click.option("--backgrounds", type=PATH_DIR, default=None,
              help="Background pools: a folder with test/ (default ./backgrounds).")
@click.option("--manifests", type=PATH_DIR, default=None,
              help="Folder of the manifests the sets were rendered from (default "
                   "corrupted/<dataset>/<split>/seed-<S>); they must exist.")
@click.option("--profile", is_flag=True,
              help="Also the background-reliance profile, from the variants' files and worst-k repeats.")
@click.option("--worst-k", type=option_type(rules.WORST_K), default=10, show_default=True,
              help="Backgrounds per query of the profile's worst case (the files repeat-0 … repeat-<k-1>).")
@click.option("--l2-normalize", is_flag=True,
              help="Scale every embedding to unit length first (what bgbias does to a model's output by "
                   "default); without it they are ranked as given.")
@click.option("--name", default=None,
              help="The report's method name (default: the embeddings folder's name).")
@click.option("--out", type=PATH_DIR, default=None,
              help="Report folder (default <embeddings>/report, which is never read as a set).")
@click.option("--max-memory", type=BYTES, default=None,
              help="Memory the scoring's neighbour lists may take at once, e.g. 512M or 4G (default 1G).")
def score(folder: Path, dataset_name: str, root: Path | None, split: str, protocol: str, fold: int,
          repeats: int, seed: int, masks: Path | None, backgrounds: Path | None, manifests: Path | None,
          profile: bool, worst_k: int, l2_normalize: bool, name: str | None, out: Path | None,
          max_memory: int | None) -> None:
    """The report (and with --profile the profile) of `bgbias eval` from your own embeddings of the sets
    `bgbias corrupt --render` writes, with the same files."""
    from bgbias.api import score as score_folder
    from bgbias.measurement.embedding_files import REPORT_FOLDER

    result = score_folder(folder, dataset_name, root, split=split, protocol=protocol, fold=fold,
                          repeats=repeats, seed=seed, profile=profile, worst_k=worst_k, masks=masks,
                          backgrounds=backgrounds, manifests=manifests, l2_normalize=l2_normalize, name=name,
                          max_memory=max_memory, out=out if out is not None else folder / REPORT_FOLDER,
                          log=lambda line: click.echo(line, err=True))
    click.echo(result.summary())
