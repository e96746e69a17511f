"""How every ``bgbias`` command ends: a library error as one line with its fix, warnings as ``warning:``
lines, Ctrl-C and SIGTERM with their exit statuses."""

from __future__ import annotations

import warnings

import click

from bgbias.errors import BgbiasError
from bgbias.signals import Terminated, interruption_status, sigterm_as_interrupt


class CommandGroup(click.Group):
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


OPTIONS = {"models_file": "--models"}
"""The option of each argument (an error's ``parameter``) whose option is not ``--`` and its name with
dashes."""


def _fail(ctx: click.Context, err: BgbiasError) -> None:
    click.secho(f"error: {err.render(OPTIONS)}", err=True, fg="red")
    ctx.exit(2)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    click.secho(f"warning: {message}", err=True, fg="yellow")
