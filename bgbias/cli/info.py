"""``bgbias methods``: what is registered, with its options."""

from __future__ import annotations

import click


@click.command("methods")
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
