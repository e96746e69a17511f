"""The option types and option groups that several commands share (datasets, splits, the bench's settings)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

from bgbias import options as rules
from bgbias.data.registry import dataset_names

PATH_DIR = click.Path(file_okay=False, path_type=Path)


def given_options(ctx: click.Context, names: Iterable[str]) -> list[str]:
    """The options among the parameters ``names`` that the command line set, as the command spells them:
    for a refusal of options that another one makes pointless."""
    return [param.opts[0] for param in ctx.command.params if param.name in names
            and ctx.get_parameter_source(param.name) != click.core.ParameterSource.DEFAULT]


def option_type(declared: rules.Declared) -> click.ParamType:
    """The click type of an option declared as a pydantic type in :mod:`bgbias.options`, which the Python
    API validates its argument of the same name against: one declaration for both."""
    if rules.choices(declared):
        return click.Choice(rules.choices(declared))
    kind = rules.bare_type(declared)
    if kind in (int, float):
        least, greatest = rules.limits(declared)
        return (click.IntRange if kind is int else click.FloatRange)(min=least, max=greatest)
    return {bool: click.BOOL, str: click.STRING}[kind]


BYTE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


class ByteSize(click.ParamType):
    """A number of bytes, with K, M or G (powers of 1024) after it where wanted: ``512M``, ``4G``."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip().upper().removesuffix("B").removesuffix("I")
        number, unit = (text[:-1], text[-1]) if text[-1:] and text[-1] in "KMG" else (text, "")
        try:
            size = float(number) * BYTE_UNITS[unit]
        except ValueError:
            self.fail(f"{value!r} is not a size: write bytes, or a number with K, M or G (512M, 4G)", param,
                      ctx)
        if not math.isfinite(size) or size < 1:
            self.fail(f"{value!r} is not a positive size", param, ctx)
        return int(size)


BYTES = ByteSize()


DATASETS = dataset_names()  # the layout modules are light: no numpy, PIL or torch


def options(*declared):
    """A decorator that adds the click options ``declared`` to a command, in this order: a group of options
    that several commands share."""

    def decorate(command):
        for option in reversed(declared):
            command = option(command)
        return command

    return decorate


def dataset_options(help: str = "Dataset layout.", default: str | None = None, required: bool = True):
    """--dataset and --root, shared by every command that reads a dataset: --dataset is required unless it
    has a ``default`` or the command has one of its own (a run's dataset)."""
    return options(
        click.option("--dataset", "dataset_name", type=click.Choice(DATASETS), default=default,
                     required=required and default is None, show_default=default is not None, help=help),
        click.option("--root", type=click.Path(path_type=Path), default=None,
                     help="Dataset folder (default: <data-root>/<the dataset's usual folder name>)."))


split_options = options(
    click.option("--protocol", type=option_type(rules.PROTOCOL), default="fixed", show_default=True),
    click.option("--fold", type=option_type(rules.FOLD), default=0, show_default=True, help="cv4 fold."))
"""--protocol and --fold: the fixed split of the paper, or one fold of 4-fold cross-validation."""


def bench_options(prefix: str = ""):
    """The bench's size preset, ρ and seed: ``--preset``, ``--rho``, ``--seed`` for `assets bench`;
    ``--bench-preset``, ``--rho``, ``--bench-seed`` for `study`, whose ``--preset`` and ``--seeds`` are the
    study's own."""
    return options(
        click.option(f"--{prefix}preset", "bench_preset", type=click.Choice(["small", "large"]),
                     default="small", show_default=True,
                     help="small: 8 views of 128 px per class; large: 16 views of 224 px."),
        click.option("--rho", type=click.FloatRange(0.0, 1.0), default=0.9, show_default=True,
                     help="Share of a class's views that show the class's home background."),
        click.option(f"--{prefix}seed", "bench_seed", type=click.IntRange(min=0), default=0,
                     show_default=True, help="Seed of the bench's class split and views."))


TRUST_MODEL_OPTION = click.option(
    "--trust-model", is_flag=True,
    help="Run a TorchScript model unchecked, and (audit) the factories a --models file names: for models "
         "you made or trust as you would their author's Python code, which may then read and write files.")
DEVICE_OPTION = click.option("--device", default="auto", show_default=True,
                             help="auto (CUDA when present), cpu, cuda or cuda:N.")
AMP_OPTION = click.option(
    "--amp", type=option_type(rules.AMP), default=None,
    help="Autocast of the network while embedding: auto (bfloat16 on CUDA, float32 on a CPU), off "
         "(float32), bf16 (CUDA, or a CPU that computes it natively), fp16 (CUDA). Default: a run's own amp; "
         "auto for any other model (an ONNX one runs in float32).")
MEMORY_FORMAT_OPTION = click.option(
    "--memory-format", type=option_type(rules.MEMORY_FORMAT), default=None,
    help="Layout of the weights and inputs. Default: a run's own model.memory_format; channels_last for any "
         "other model (an ONNX one runs in onnxruntime's own).")
compute_options = options(TRUST_MODEL_OPTION, DEVICE_OPTION, AMP_OPTION, MEMORY_FORMAT_OPTION)
"""How the commands that embed with a frozen encoder (``leakage``, ``audit``) run it, declared once for them
and ``eval``/``explain``."""
loader_options = options(
    click.option("--batch-size", type=option_type(rules.BATCH_SIZE), default=64, show_default=True),
    click.option("--workers", type=option_type(rules.WORKERS), default=None,
                 help="Data loader worker processes (default: sized to the machine: none on a CPU of up to 4 "
                      "cores, every core but one on a GPU, up to 8)."))
"""The loader of the commands that embed a dataset (``eval``, ``leakage``, ``audit``)."""

