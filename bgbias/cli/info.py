"""``bgbias methods``: what is registered, with its options, or the JSON Schema of a run configuration."""

from __future__ import annotations

import click


@click.command("methods")
@click.option("--schema", is_flag=True,
              help="Print the JSON Schema of a run configuration (config.json, --config files) instead, for "
                   "editors; its loss section holds every method's options, or --method's.")
@click.option("--method", default=None, help="With --schema: the method whose options the loss section has.")
def methods(schema: bool, method: str | None) -> None:
    """List the registered methods, backbones and attribution methods (with their options)."""
    if schema or method is not None:
        import json

        from bgbias.engine.config import config_json_schema

        if not schema:
            raise click.UsageError("--method names the method of --schema: pass --schema too")
        click.echo(json.dumps(config_json_schema(method), indent=2))
        return
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
