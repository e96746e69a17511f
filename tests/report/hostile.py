"""Names a user (or a downloaded dataset) can give bgbias that are markup to a Markdown renderer, and the
check that a Markdown file shows them as text."""

from __future__ import annotations

import re

HOSTILE_CLASSES = ("<img src=x onerror=alert(1)>", "<script>alert(1)", "](javascript:alert(1))", "a|b\nc")
"""Class folders: an HTML tag, a script, a link target, a table cell separator and a line break."""
HOSTILE_IMAGES = ("<img src=y onerror=alert(2)>.png", "x|y\nz.jpg", "plain.jpg")
HOSTILE_RUNS = ("<img src=x onerror=alert(3)> run|a", "](javascript:alert(4)) *run*")
HOSTILE_TITLE = "<script>alert(5)</script> **study** | [x](javascript:alert(6))"

_OWN_TAG = re.compile(r"</?code>")
_SCHEME_TARGET = re.compile(r"(?<!\\)\]\(\s*<?[A-Za-z][A-Za-z0-9+.-]*:")
_UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")


def assert_inert(markdown: str, name: str = "") -> None:
    """No HTML but bgbias's own ``<code>``, no link or image target with a scheme, and every table row with
    as many cells as its header (``name`` says which file in a failure)."""
    tagged = [line for line in _OWN_TAG.sub("", markdown).splitlines() if "<" in line]
    assert not tagged, (name, tagged)
    assert not _SCHEME_TARGET.search(markdown), (name, _SCHEME_TARGET.search(markdown))
    for table in _tables(markdown):
        counts = {len(_UNESCAPED_PIPE.findall(row)) for row in table}
        assert len(counts) == 1, (name, table)


def _tables(markdown: str) -> list[list[str]]:
    tables: list[list[str]] = []
    rows: list[str] = []
    for line in [*markdown.splitlines(), ""]:
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            tables.append(rows)
            rows = []
    return tables
