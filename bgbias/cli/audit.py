"""``bgbias audit``: several models scored side by side on one dataset, ranked by corrupted MAP@R
(docs/audit.md)."""

from __future__ import annotations

from pathlib import Path

import click

from bgbias import options as rules
from bgbias.cli.options import PATH_DIR, compute_options, dataset_options, loader_options, option_type
from bgbias.errors import EXIT_PARTIAL


@click.command("audit")
@dataset_options("Dataset to score every model on.")
@click.option("--model", "models", multiple=True, metavar="[LABEL =] SPEC [KEY=VALUE ...]",
              help="A model, as bgbias eval --model takes it (a factory package.module:callable, a "
                   "TorchScript or ONNX file, a run folder), with its label and a factory's keyword "
                   "arguments where wanted (repeatable). A factory is imported and called: name only "
                   "packages you trust.")
@click.option("--models", "models_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A text file of models, one [LABEL =] SPEC [KEY=VALUE ...] per line (# comments). A "
                   "factory in it is refused unless --trust-model: the file may come from someone else.")
@click.option("--split", type=option_type(rules.CHOSEN_SPLIT), default=None,
              help="Split to score (default: all on one's own folder or table when no model is a run bgbias "
                   "trained; else test). The page says which and why.")
@click.option("--repeats", type=option_type(rules.REPEATS), default=5, show_default=True,
              help="Corrupted repeats (each a fixed manifest, shared with bgbias eval).")
@click.option("--fill", type=option_type(rules.FILL), default="inpainted", show_default=True,
              help="How the leakage meter fills the object's hole in the background-only images.")
@click.option("--masks", type=PATH_DIR, default=None, help="Saliency masks (default masks/<dataset>).")
@click.option("--backgrounds", type=PATH_DIR, default=None,
              help="Background pools: a folder with test/ (default ./backgrounds).")
@click.option("--out", type=PATH_DIR, default=None,
              help="Folder of the page and of a folder per model (default runs/audit/<dataset>-<split>); "
                   "running the same command again reuses every finished model.")
@compute_options
@click.option("--seed", type=option_type(rules.SEED), default=0, show_default=True,
              help="Seed of the corrupted sets, the leakage probe's folds and its bootstrap.")
@loader_options
@click.option("--no-progress", is_flag=True, help="No progress bars.")
def audit(dataset_name: str, root: Path | None, models: tuple[str, ...], models_file: Path | None,
          split: str | None,
          repeats: int, fill: str, masks: Path | None, backgrounds: Path | None, out: Path | None,
          trust_model: bool, device: str, amp: str | None, memory_format: str | None, seed: int,
          batch_size: int, workers: int | None, no_progress: bool) -> None:
    """Several models side by side on one dataset: clean and corrupted MAP@R, the background-reliance profile
    and the dataset's background leakage seen through each, ranked by corrupted MAP@R in audit.md,
    audit.html and audit.json. Exits with status 3 when a model failed (the others are on the page)."""
    from bgbias.api import as_embedding_model
    from bgbias.data.registry import open_dataset
    from bgbias.model_audit.entries import check_labels, parse_entry, read_list_file
    from bgbias.model_audit.run import AuditSettings, audit_split, default_audit_folder, run_audit

    entries = [entry for text in models if (entry := parse_entry(text, f"--model {text!r}")) is not None]
    entries += read_list_file(models_file, trust=trust_model) if models_file is not None else []
    check_labels(entries)
    dataset = open_dataset(dataset_name, root)
    split, split_reason = audit_split(dataset, entries, split)
    settings = AuditSettings(split=split, split_reason=split_reason, repeats=repeats, seed=seed, fill=fill,
                             masks=masks,
                             backgrounds=backgrounds, batch_size=batch_size, workers=workers,
                             progress=not no_progress)

    def load(entry, home):
        return as_embedding_model(entry.model, device=device, trust_model=trust_model, amp=amp,
                                  memory_format=memory_format, args=entry.args, homes=home)

    result = run_audit(dataset, entries, load, settings, out or default_audit_folder(dataset, split),
                       log=lambda line: click.echo(line, err=True))
    click.echo(result.summary(), nl=False)
    click.echo(f"written: {', '.join(str(path) for path in result.files.values())}", err=True)
    if result.failed:
        click.echo(f"{len(result.failed)} of {len(result.page.ranked)} models failed: "
                   f"{', '.join(outcome.label for outcome in result.failed)}", err=True)
        click.get_current_context().exit(EXIT_PARTIAL)
