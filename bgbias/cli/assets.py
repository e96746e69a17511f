"""``bgbias assets``: the offline provisioning of weights, stamps, photos, the pools and the bench."""

from __future__ import annotations

from pathlib import Path

import click

from bgbias.cli.group import CommandGroup
from bgbias.cli.options import PATH_DIR, bench_options


@click.group(cls=CommandGroup)
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
    """Fetch NAMES (default: all but the opt-in full U²-Net and EfficientNet-Lite0) into $BGBIAS_HOME and
    verify their checksums."""
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
@click.option("--out", type=PATH_DIR, default=None, help="Pool folder to complete (default ./backgrounds).")
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
    from bgbias.study.bench import prepare_pools

    click.echo(format_pools_summary(prepare_pools(out, seed=seed), str(out or backgrounds_root())))


@assets.command("bench")
@click.option("--out", type=PATH_DIR, default=None, help="Output folder (default <data-root>/bench).")
@bench_options()
def assets_bench(out: Path | None, bench_preset: str, rho: float, bench_seed: int) -> None:
    """Build the bench: Tux Paint photo stamps on real background photos, with exact masks."""
    from bgbias.report.console import format_bench_summary
    from bgbias.study.bench import prepare_bench

    click.echo(format_bench_summary(prepare_bench(out, preset=bench_preset, rho=rho, seed=bench_seed)))
