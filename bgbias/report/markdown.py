"""Markdown that holds only the markup bgbias wrote: every string from elsewhere is written as text.

Class folders, image names, run folders, model specs and titles are the user's, and a report must show them,
never obey them (``<img onerror=...>``, ``](javascript:...)``, a ``|`` or a line break). Every Markdown file
bgbias writes is made by these functions, so a new writer cannot forget the escaping: :func:`text`,
:func:`code` (``<code>`` around escaped text where a code span cannot carry it safely), :func:`image` and
:func:`link` (relative, percent-encoded targets only, so no scheme) and :func:`table`.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Sequence

_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_INLINE_MARKUP = frozenset("\\`*[]|~")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_BULLET_OR_HEADING = re.compile(r"^( {0,3})([#+-])(?=[ \t]|$)")
_ORDERED_MARKER = re.compile(r"^( {0,3}\d{1,9})([.)])(?=[ \t]|$)")
_UNSAFE_IN_CODE = re.compile(r"[`|<>&\[\]\r\n]")


def text(value: object, *, starts_block: bool = False) -> str:
    """``value`` (as ``str``) as Markdown text that renders as exactly these characters and nothing else.

    ``starts_block``: the text begins a paragraph, list item or heading, where ``# ``, ``- `` or ``1. `` would
    make a heading or a list."""
    value = _LINE_BREAK.sub(" ", str(value))
    out = []
    for index, char in enumerate(value):
        if char in _ENTITIES:
            out.append(_ENTITIES[char])
        elif char == "_" and not _intraword(value, index):
            out.append("\\_")
        elif char in _INLINE_MARKUP:
            out.append("\\" + char)
        else:
            out.append(char)
    escaped = "".join(out)
    if starts_block:
        escaped = _ORDERED_MARKER.sub(r"\1\\\2", escaped, count=1)
        escaped = _BULLET_OR_HEADING.sub(r"\1\\\2", escaped, count=1)
    return escaped


def code(value: str) -> str:
    """``value`` as inline code: a plain code span where that is safe, else ``<code>`` around :func:`text`
    (a table cell still splits at a code span's ``|``, a backtick ends it, and a renderer that is not
    CommonMark may read ``<`` or ``](`` in it as markup)."""
    if _UNSAFE_IN_CODE.search(value) or not value.strip():
        return f"<code>{text(value)}</code>"
    return f"`{value}`"


def strong(value: str) -> str:
    return f"**{text(value)}**"


def heading(value: str, level: int) -> str:
    """A heading: its ``#`` characters are escaped too, since trailing ones would close it."""
    return "#" * level + " " + text(value, starts_block=True).replace("#", "\\#")


def image(alt: str, target: str) -> str:
    """An image of the file at the relative POSIX path ``target``, linked as :func:`link` links it."""
    return "!" + link(alt, target)


def link(label: str, target: str) -> str:
    """A link to the relative POSIX path ``target``, percent-encoded (``:`` becomes ``%3A``, so the target is
    a relative path whatever the file is called), its text escaped."""
    if target.startswith("/"):
        raise ValueError(f"a link or image target must be a relative path, got {target!r}")
    return f"[{text(label)}]({urllib.parse.quote(target)})"


def table(headers: Sequence[object], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub Markdown table; every column but the first is right-aligned (they hold numbers), ``None`` is
    an empty cell, and every cell is :func:`text`."""
    def line(cells: Sequence[object]) -> str:
        return "| " + " | ".join("" if cell is None else text(cell) for cell in cells) + " |"

    rule = "|" + "|".join(["---", *("---:" for _ in headers[1:])]) + "|"
    return "\n".join([line(headers), rule, *(line(row) for row in rows)])


def _intraword(value: str, index: int) -> bool:
    """Whether the ``_`` at ``index`` sits between two letters or digits, where it cannot open or close
    emphasis (``multi_similarity`` stays as it is)."""
    return 0 < index < len(value) - 1 and value[index - 1].isalnum() and value[index + 1].isalnum()
