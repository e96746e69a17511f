"""A report as a list of blocks, written as Markdown and as one self-contained HTML page (style inline,
figures as ``data:`` URIs, no link to any other resource), both from the same blocks so they cannot disagree.

Text is always text: a ``str`` is shown as its characters in both renderings, whatever it holds (a
``<script>`` in a class folder's name), and the only markup is typed (:class:`Code`, :class:`Strong`,
:class:`Link`), so a writer cannot forget to escape what it shows.
"""

from __future__ import annotations

import base64
import html
import os
import re
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bgbias.errors import AssetError, OptionError
from bgbias.fileio import write_text_atomic
from bgbias.report import markdown

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
HEADING_LEVELS = range(1, 5)
_STYLE = """\
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
  line-height: 1.5; color: #1f2328; max-width: 1100px; margin: 0 auto; padding: 1rem 1.5rem; }
h1, h2, h3, h4 { line-height: 1.25; }
h2 { border-bottom: 1px solid #d0d7de; padding-bottom: .3em; margin-top: 2em; }
code { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 90%; background: #eff1f3;
  padding: .1em .3em; border-radius: 4px; overflow-wrap: anywhere; }
nav.toc { background: #f6f8fa; border: 1px solid #d0d7de; border-radius: 6px; padding: .5em 1em; }
nav.toc p { margin: 0; font-weight: bold; }
.table-wrap { overflow-x: auto; margin: 1em 0; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; font-size: 90%; }
caption { caption-side: top; text-align: left; font-style: italic; padding: .3em 0; }
th, td { border: 1px solid #d0d7de; padding: .3em .4em; text-align: left; vertical-align: top; }
th:not(:first-child), td:not(:first-child) { text-align: right; }
td:not(:first-child) { white-space: nowrap; }
thead th { background: #eaeef2; }
tbody tr:nth-child(even) { background: #f6f8fa; }
figure { margin: 1.5em 0; }
img { max-width: 100%; height: auto; }
figcaption { font-style: italic; color: #57606a; }
"""


@dataclass(frozen=True)
class Code:
    """A string shown as code (a command, a folder, a run's name): as it is, in a fixed-width font."""

    text: str


@dataclass(frozen=True)
class Strong:
    """A string shown in bold (a question the next words answer)."""

    text: str


@dataclass(frozen=True)
class Link:
    """A string that links to a file or folder at the relative path ``target`` beside the page (a model's
    report folder): percent-encoded, so no scheme (``javascript:``) can become its target. A link leads
    away from the page: the HTML page still needs nothing beside it to be read whole."""

    text: str
    target: str

    def __post_init__(self) -> None:
        if self.target.startswith("/") or "\\" in self.target:
            raise OptionError(f"the link {self.text!r} has the target {self.target!r}; a link's target is a "
                              "relative POSIX path", fix="link to a path relative to the page's folder")


Span = str | Code | Strong | Link
Text = str | tuple[Span, ...]
"""Running text: a plain string, or spans in a row (``("the run ", Code(folder), " failed")``)."""


@dataclass(frozen=True)
class Heading:
    """A section title; level 1 is the page's own rank, level-2 headings make the HTML table of contents."""

    text: str
    level: int = 2

    def __post_init__(self) -> None:
        if self.level not in HEADING_LEVELS:
            raise OptionError(f"the heading {self.text!r} has level {self.level}; levels go from 1 to 4",
                              fix="give the heading a level from 1 to 4")


@dataclass(frozen=True)
class Paragraph:
    """Running text."""

    text: Text


@dataclass(frozen=True)
class Bullets:
    """An unordered list; an item that is itself ``Bullets`` is a list nested under the item before it."""

    items: tuple[Text | Bullets, ...]

    def __post_init__(self) -> None:
        if self.items and isinstance(self.items[0], Bullets):
            raise OptionError("a nested list comes first in its list, under no item",
                              fix="put the nested list after the item it belongs to")


@dataclass(frozen=True)
class Table:
    """Rows under headers; every column but the first holds numbers and is right-aligned, as in
    :func:`~bgbias.report.markdown.table`."""

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str = ""

    def __post_init__(self) -> None:
        for index, row in enumerate(self.rows):
            if len(row) != len(self.headers):
                raise OptionError(
                    f"row {index + 1} of the table {self.caption or self.headers!r} has {len(row)} cells for "
                    f"{len(self.headers)} headers: {row!r}",
                    fix="give every row one cell per header",
                )


@dataclass(frozen=True)
class Figure:
    """A PNG file drawn by an earlier step; read only when the report is rendered."""

    path: Path
    caption: str


Block = Heading | Paragraph | Bullets | Table | Figure


def to_markdown(blocks: Sequence[Block], folder: Path) -> str:
    """GitHub Markdown of ``blocks``, to be written into ``folder``: figures are linked by their path relative
    to it, so the Markdown and its figures can move together."""
    return "\n\n".join(_markdown_block(block, folder) for block in blocks) + "\n"


def to_html(blocks: Sequence[Block], title: str) -> str:
    """One HTML5 page of ``blocks`` that needs no other file: inline style, figures embedded, and a table of
    contents of the level-2 headings under the title."""
    anchors = _heading_ids(blocks)
    body = [_html_block(block, anchors.get(index, "")) for index, block in enumerate(blocks)]
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title>",
        f"<style>\n{_STYLE}</style>",
        "</head>",
        "<body>",
        f"<h1>{_inline_html(title)}</h1>",
        *_table_of_contents(blocks, anchors),
        *body,
        "</body>",
        "</html>",
    ]) + "\n"


def write_document(blocks: Sequence[Block], out_dir: Path, name: str, title: str) -> dict[str, Path]:
    """Write ``<name>.md`` (under ``# title``) and ``<name>.html`` into ``out_dir``, each atomically; both are
    rendered first, so a missing figure leaves no half of the pair behind."""
    markdown = to_markdown([Heading(title, 1), *blocks], out_dir)
    page = to_html(blocks, title)
    paths = {f"{name}_md": out_dir / f"{name}.md", f"{name}_html": out_dir / f"{name}.html"}
    write_text_atomic(paths[f"{name}_md"], markdown)
    write_text_atomic(paths[f"{name}_html"], page)
    return paths


def _markdown_block(block: Block, folder: Path) -> str:
    match block:
        case Heading(text, level):
            return markdown.heading(text, level)
        case Paragraph(text):
            return _inline_markdown(text, starts_block=True)
        case Bullets():
            return _markdown_bullets(block, "")
        case Table(headers, rows, caption):
            table = markdown.table(headers, rows)
            return f"*{markdown.text(caption)}*\n\n{table}" if caption else table
        case Figure(path, caption):
            _png_bytes(block)
            target = Path(os.path.relpath(path, folder)).as_posix()
            return f"{markdown.image(caption, target)}\n\n*{markdown.text(caption)}*"
    raise TypeError(f"not a report block: {block!r}")


def _markdown_bullets(bullets: Bullets, indent: str) -> str:
    """``- item`` lines, a nested list two spaces further in (where its items' text starts)."""
    return "\n".join(_markdown_bullets(item, indent + "  ") if isinstance(item, Bullets)
                     else f"{indent}- {_inline_markdown(item, starts_block=True)}" for item in bullets.items)


def _inline_markdown(text: Text, *, starts_block: bool = False) -> str:
    spans = (text,) if isinstance(text, str) else text
    return "".join(_markdown_span(span, starts_block and index == 0) for index, span in enumerate(spans))


def _markdown_span(span: Span, starts_block: bool) -> str:
    match span:
        case str():
            return markdown.text(span, starts_block=starts_block)
        case Code(text):
            return markdown.code(text)
        case Strong(text):
            return markdown.strong(text)
        case Link(text, target):
            return markdown.link(text, target)
    raise TypeError(f"not a text span: {span!r}")


def _html_block(block: Block, anchor: str) -> str:
    match block:
        case Heading(text, level):
            return f'<h{level} id="{anchor}">{_inline_html(text)}</h{level}>'
        case Paragraph(text):
            return f"<p>{_inline_html(text)}</p>"
        case Bullets():
            return _html_bullets(block)
        case Table(headers, rows, caption):
            return _html_table(headers, rows, caption)
        case Figure(_path, caption):
            data = base64.b64encode(_png_bytes(block)).decode("ascii")
            return (f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(caption)}">'
                    f"<figcaption>{_inline_html(caption)}</figcaption></figure>")
    raise TypeError(f"not a report block: {block!r}")


def _html_bullets(bullets: Bullets) -> str:
    """``<ul>`` with a nested list inside the ``<li>`` of the item before it."""
    items: list[str] = []
    for item in bullets.items:
        if isinstance(item, Bullets):
            items[-1] = items[-1].removesuffix("</li>") + "\n" + _html_bullets(item) + "</li>"
        else:
            items.append(f"<li>{_inline_html(item)}</li>")
    return "\n".join(["<ul>", *items, "</ul>"])


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[str]], caption: str) -> str:
    """A table inside a box that scrolls sideways, so a wide table never widens the page."""
    def cells(tag: str, row: Sequence[str]) -> str:
        return "<tr>" + "".join(f"<{tag}>{_inline_html(cell)}</{tag}>" for cell in row) + "</tr>"

    return "\n".join([
        '<div class="table-wrap"><table>',
        *([f"<caption>{_inline_html(caption)}</caption>"] if caption else []),
        f"<thead>{cells('th', headers)}</thead>",
        "<tbody>",
        *(cells("td", row) for row in rows),
        "</tbody>",
        "</table></div>",
    ])


def _table_of_contents(blocks: Sequence[Block], anchors: dict[int, str]) -> list[str]:
    """Links to the level-2 headings; none without them, so a short page has no empty box."""
    links = [f'<li><a href="#{anchors[index]}">{_inline_html(block.text)}</a></li>'
             for index, block in enumerate(blocks) if isinstance(block, Heading) and block.level == 2]
    if not links:
        return []
    return ['<nav class="toc">', "<p>Contents</p>", "<ul>", *links, "</ul>", "</nav>"]


def _heading_ids(blocks: Sequence[Block]) -> dict[int, str]:
    """Each heading's id by its index among the blocks: its slug, with ``-2``, ``-3``, ... when taken, so
    two sections of the same title still get links of their own."""
    ids: dict[int, str] = {}
    taken: set[str] = set()
    for index, block in enumerate(blocks):
        if isinstance(block, Heading):
            # Lower case, runs of anything but letters and digits as one ``-``.
            base = re.sub(r"[\W_]+", "-", block.text.lower()).strip("-") or "section"
            anchor, count = base, 1
            while anchor in taken:
                count += 1
                anchor = f"{base}-{count}"
            ids[index] = anchor
            taken.add(anchor)
    return ids


def _inline_html(text: Text) -> str:
    """``text`` escaped, its :class:`Code` and :class:`Strong` spans as ``<code>`` and ``<strong>``."""
    spans = (text,) if isinstance(text, str) else text
    return "".join(_html_span(span) for span in spans)


def _html_span(span: Span) -> str:
    match span:
        case str():
            return html.escape(span)
        case Code(text):
            return f"<code>{html.escape(text)}</code>"
        case Strong(text):
            return f"<strong>{html.escape(text)}</strong>"
        case Link(text, target):
            return f'<a href="{html.escape(urllib.parse.quote(target))}">{html.escape(text)}</a>'
    raise TypeError(f"not a text span: {span!r}")


def _png_bytes(figure: Figure) -> bytes:
    """The figure's file, checked to be a PNG: a missing or wrong figure stops the report before any of it is
    written, naming the file, rather than leaving a broken image in it."""
    fix = "run the step that draws it again, or leave the figure out"
    try:
        data = figure.path.read_bytes()
    except OSError as error:
        raise AssetError(f"the figure {figure.caption!r} cannot be read: {error.strerror or error}",
                         path=figure.path, fix=fix) from None
    if not data.startswith(PNG_SIGNATURE):
        raise AssetError(f"the figure {figure.caption!r} is not a PNG file", path=figure.path, fix=fix)
    return data
