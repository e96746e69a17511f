"""The ``bgbias`` command lines of a page's code block, checked against the real command line without running
anything: the command path exists, every option exists on the command it is given to, and a choice option's
written value is one of its choices. What counts as a command line and as a placeholder is in
tests/test_docs_code_blocks.py (test_every_bgbias_command_line_matches_the_cli)."""

from __future__ import annotations

import re
import shlex

import click

from bgbias.cli import main as bgbias_main
from tests.docs_blocks import CodeBlock

_SEPARATORS = {"&&", "||", ";", "|", "&"}
_LEADING_WORDS = {"do", "then", "else", "time", "nohup", "$"}
"""Shell words that may come before a command in a segment."""
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=\S*")
_PLACEHOLDER = re.compile(r"\.\.\.|…|[<>$*\[\]{}]|^~")


def command_lines(block: CodeBlock) -> list[tuple[int, list[str]]]:
    """``(page line, words)`` of each ``bgbias`` invocation in the block: lines ending in ``\\`` joined with
    the next (the number is the first one's), comments dropped, split at ``&&``, ``||``, ``;`` and ``|``."""
    found: list[tuple[int, list[str]]] = []
    pending: tuple[int, str] | None = None
    for number, line in block.lines():
        start, text = pending if pending else (number, "")
        text += line
        if line.rstrip().endswith("\\"):
            pending = (start, text.rstrip()[:-1] + " ")
            continue
        pending = None
        found += [(start, words) for words in _invocations(text)]
    if pending:  # the block's last line ends in a backslash
        found += [(pending[0], words) for words in _invocations(pending[1])]
    return found


def _invocations(text: str) -> list[list[str]]:
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars="|&;")
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:  # an unbalanced quote: prose rather than a command; the words as they stand
        words = text.split("#")[0].split()
    segments: list[list[str]] = [[]]
    for word in words:
        if word in _SEPARATORS:
            segments.append([])
        else:
            segments[-1].append(word)
    invocations = []
    for segment in segments:
        while segment and (segment[0] in _LEADING_WORDS or _ASSIGNMENT.fullmatch(segment[0])):
            segment = segment[1:]
        is_label = len(segment) > 1 and segment[1].endswith(":")  # a diagram's `bgbias train: ...`
        if segment and (segment[0] == "bgbias" or segment[0].endswith("/bin/bgbias")) and not is_label:
            invocations.append(["bgbias", *segment[1:]])
    return invocations


def is_placeholder(word: str) -> bool:
    """Whether ``word`` stands for something the reader fills in (``...``, ``<folder>``, ``$VAR``,
    ``~/data/...``, ``runs/*``, ``[--flag]``) rather than being typed as written."""
    return bool(_PLACEHOLDER.search(word))


def command_problems(words: list[str]) -> list[str]:
    """What is wrong with the invocation ``words`` (``["bgbias", ...]``); empty when the command path exists
    and every option and written choice does."""
    command: click.Command = bgbias_main
    ctx = command.make_context("bgbias", [], resilient_parsing=True)
    problems: list[str] = []
    rest = words[1:]
    while rest:
        word, rest = rest[0], rest[1:]
        if word == "--":
            break
        option_name = word.strip("[]")
        if option_name.startswith("-") and not _is_number(option_name):
            problem, rest = _check_option(command, ctx, option_name, rest)
            problems += [problem] if problem else []
        elif isinstance(command, click.Group):
            if is_placeholder(word):
                break  # the command itself is left to the reader: nothing below it can be checked
            child = command.get_command(ctx, word)
            if child is None:
                problems.append(f"`{ctx.command_path}` has no command `{word}` "
                                f"(its commands: {', '.join(command.list_commands(ctx))})")
                break
            command, ctx = child, child.make_context(word, [], parent=ctx, resilient_parsing=True)
    return problems


def _check_option(command: click.Command, ctx: click.Context, word: str,
                  rest: list[str]) -> tuple[str | None, list[str]]:
    """The problem with option ``word`` of ``command`` (or None) and the words after its value."""
    name, has_equals, value = word.partition("=")
    option = next((param for param in command.get_params(ctx) if isinstance(param, click.Option)
                   and name in (*param.opts, *param.secondary_opts)), None)
    if option is None:
        return f"`{ctx.command_path}` has no option `{name}` (see `{ctx.command_path} --help`)", rest
    if option.is_flag or option.count:
        return None, rest
    if not has_equals:
        if not rest:
            return None, rest
        value, rest = rest[0], rest[1:]
    if isinstance(option.type, click.Choice) and not is_placeholder(value):
        choices = [str(choice) for choice in option.type.choices]
        matches = value in choices if option.type.case_sensitive else value.lower() in map(str.lower, choices)
        if not matches:
            return (f"`{ctx.command_path} {name}` takes one of {', '.join(choices)}, not `{value}`", rest)
    return None, rest


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True
