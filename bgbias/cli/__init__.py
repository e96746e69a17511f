"""The ``bgbias`` command line: parses options and calls library functions, nothing more. Heavy libraries are
imported inside the commands, so ``bgbias --help`` answers at once; :func:`main` is the ``bgbias`` command.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from bgbias.cli import assets, audit, data, embeddings, info, leakage, models, reports
from bgbias.cli.group import CommandGroup


def _print_version(ctx: click.Context) -> None:
    """``bgbias --version``: the version is read only when asked for (reading it costs time at start)."""
    import bgbias

    click.echo(f"bgbias {bgbias.__version__}")
    ctx.exit()


@click.group(cls=CommandGroup,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, help="Show the version and exit.",
              callback=lambda ctx, _param, value: _print_version(ctx) if value else None)
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


for _command in (assets.assets, data.datasets, data.masks, data.corrupt, models.train, models.evaluate,
                 embeddings.score, models.explain, leakage.leakage, audit.audit, reports.report,
                 reports.study, info.methods):
    main.add_command(_command)
