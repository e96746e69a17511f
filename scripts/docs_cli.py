"""Write docs/cli.md, the command-line page, from the ``--help`` of every ``bgbias`` command, so that the page
is what a user sees and cannot drift from the commands (issue 35: the CLI page is generated from ``--help``).
After changing a command's options or help text, rewrite the page and commit it:

    .venv/bin/python scripts/docs_cli.py            # rewrites docs/cli.md
    .venv/bin/python scripts/docs_cli.py --check    # exit status 1, naming each command whose help differs

The help is click's own, formatted for a terminal 100 columns wide whatever the terminal running the script.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bgbias.cli import main as bgbias_main

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "cli.md"
WIDTH = 100
"""The terminal width the help is formatted for (click would otherwise ask the terminal it runs in)."""
HEADER = (
    "# Command line\n\n"
    "Every `bgbias` command's `--help`, as printed in a terminal 100 columns wide. The page is written by\n"
    "`scripts/docs_cli.py` from the commands themselves: do not edit it, run\n"
    "`.venv/bin/python scripts/docs_cli.py` after changing a command.\n"
)
FIX = "run `.venv/bin/python scripts/docs_cli.py` and commit docs/cli.md"


def command_helps() -> Iterator[tuple[str, str]]:
    """``(command path, help text)`` of ``bgbias`` and of every command under it, depth first, subcommands in
    the order ``--help`` lists them."""
    yield from _helps(bgbias_main, bgbias_main.make_context("bgbias", [], resilient_parsing=True,
                                                            terminal_width=WIDTH))


def _helps(command: click.Command, ctx: click.Context) -> Iterator[tuple[str, str]]:
    # resilient_parsing: no callbacks run and no missing argument fails; the child contexts inherit the width
    # and the root's settings (-h as --help), as when a user types the command.
    yield ctx.command_path, command.get_help(ctx)
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            child = command.get_command(ctx, name)
            yield from _helps(child, child.make_context(name, [], parent=ctx, resilient_parsing=True))


def render() -> str:
    """The page: the header, then per command a ``## <command path>`` section holding its help."""
    return HEADER + "".join(_section(path, text) for path, text in command_helps())


def _section(path: str, help_text: str) -> str:
    return f"\n## {path}\n\n<!-- not run: help text -->\n```text\n{help_text}\n```\n"


def differences(page_text: str) -> list[str]:
    """What in ``page_text`` is not what :func:`render` writes, one line per command (its help differs, is
    missing or is not a command any more), or about the header; empty when the page is up to date."""
    rendered = render()
    written, wanted = _sections(page_text), _sections(rendered)
    problems = [f"`{path}`: its help differs from `{path} --help`" for path in wanted
                if path in written and written[path] != wanted[path]]
    problems += [f"`{path}`: missing" for path in wanted if path not in written]
    problems += [f"`{path}`: no such command" for path in written if path not in wanted]
    if not problems and page_text != rendered:
        problems.append("the header or the order of the sections differs")
    return problems


def _sections(page_text: str) -> dict[str, str]:
    sections: dict[str, str] = {}
    for chunk in page_text.split("\n## ")[1:]:
        heading, _, body = chunk.partition("\n")
        sections[heading.strip()] = body
    return sections


def main(argv: list[str] | None = None, page: Path = PAGE) -> int:
    """Write ``page``, or with ``--check`` print what differs and return 1 when it is not up to date."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit status 1 when the page is not what the script writes")
    args = parser.parse_args(argv)
    if not args.check:
        page.write_text(render(), encoding="utf-8")
        return 0
    problems = differences(page.read_text(encoding="utf-8")) if page.is_file() else ["it does not exist"]
    shown = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
    for problem in problems:
        print(f"{shown}: {problem}", file=sys.stderr)
    if problems:
        print(f"fix: {FIX}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
