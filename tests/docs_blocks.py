"""The fenced code blocks of the project's pages (README.md and docs/**/*.md) and the marker above each, for
the tests that run a block (:func:`code_block`) and for the policy that every block is run by a test or says
why not (tests/test_docs_code_blocks.py).

The line directly above a block's opening fence, at the fence's indentation, is its marker: either
``<!-- run: ID -->`` (a test calls ``code_block("<page>", "ID")`` and runs it) or
``<!-- not run: REASON -->``.
Fences are ``` or ~~~ (three or more), with or without a language, also indented inside list items; a block
ends at a fence of the same character at least as long, and its text loses the opening fence's indentation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = re.compile(r"<!-- run: (?P<id>[a-z0-9-]+) -->")
NOT_RUN = re.compile(r"<!-- not run: (?P<reason>.*?) -->")
_OPENING = re.compile(r"(?P<indent>[ ]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*)")


@dataclass(frozen=True)
class CodeBlock:
    """One fenced block: where it opens (page relative to the repository, 1-based line of the opening fence),
    its language (the info string's first word, "" without one), its text and the marker line above it."""

    page: str
    line: int
    language: str
    text: str
    marker: str
    """The line above the opening fence without the fence's indentation; "" when there is none or it is
    indented otherwise (then it marks nothing)."""
    fence: str
    """The opening fence (```, ~~~~, ...)."""
    closed: bool
    """Whether a closing fence ends the block (else it runs to the page's end)."""

    @property
    def run_id(self) -> str | None:
        """The ID of a ``<!-- run: ID -->`` marker, else None."""
        match = RUN.fullmatch(self.marker)
        return match["id"] if match else None

    @property
    def not_run_reason(self) -> str | None:
        """The REASON of a ``<!-- not run: REASON -->`` marker (possibly empty, which the policy refuses),
        else None."""
        match = NOT_RUN.fullmatch(self.marker)
        return match["reason"].strip() if match else None

    def lines(self) -> list[tuple[int, str]]:
        """``(line number in the page, line)`` of each line of the text."""
        return [(self.line + 1 + offset, line) for offset, line in enumerate(self.text.splitlines())]


def pages() -> list[str]:
    """Every page the policy covers, relative to the repository: README.md, then docs/**/*.md sorted."""
    docs = sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "docs").rglob("*.md"))
    return ["README.md", *docs]


def code_blocks(page: str) -> list[CodeBlock]:
    """The fenced blocks of ``page`` (relative to the repository, e.g. ``"docs/api.md"``), in order."""
    return parse_blocks(page, (ROOT / page).read_text(encoding="utf-8"))


def code_block(page: str, block_id: str) -> CodeBlock:
    """The block of ``page`` marked ``<!-- run: block_id -->``; the policy test finds the tests that run a
    block by this call with both arguments written as literals."""
    blocks = code_blocks(page)
    for block in blocks:
        if block.run_id == block_id:
            return block
    known = [block.run_id for block in blocks if block.run_id]
    raise LookupError(f"{page}: no block is marked <!-- run: {block_id} --> (the page's run ids: {known}); "
                      "mark the block, or call code_block with the id the page gives it")


def parse_blocks(page: str, markdown: str) -> list[CodeBlock]:
    """The fenced blocks of ``markdown``, the text of ``page``. A block left open runs to the page's end, as
    in CommonMark."""
    lines = markdown.splitlines()
    blocks: list[CodeBlock] = []
    index = 0
    while index < len(lines):
        opening = _OPENING.fullmatch(lines[index])
        if opening is None:
            index += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        closing = re.compile(rf"[ ]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*")
        end = next((later for later in range(index + 1, len(lines)) if closing.fullmatch(lines[later])),
                   len(lines))
        body = [_dedent(line, len(indent)) for line in lines[index + 1:end]]
        above = lines[index - 1] if index else ""
        at_indent = above.startswith(indent) and not above[len(indent):][:1].isspace()
        marker = above[len(indent):] if at_indent else ""
        blocks.append(CodeBlock(page=page, line=index + 1, language=(opening["info"].split() or [""])[0],
                                text="".join(f"{line}\n" for line in body), marker=marker, fence=fence,
                                closed=end < len(lines)))
        index = end + 1
    return blocks


def _dedent(line: str, indent: int) -> str:
    """``line`` less up to ``indent`` leading spaces (CommonMark: the opening fence's indentation)."""
    return line[min(indent, len(line) - len(line.lstrip(" "))):]
