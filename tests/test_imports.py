"""Imports sit at the top of their module; docs/design.md, *Where imports are*, lists every exception."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _documented() -> dict[str, set[str]]:
    """The table of docs/design.md's section: module path → the packages it may import inside functions."""
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    section = text.split("### Where imports are", 1)[1].split("\n#", 1)[0]
    allowed: dict[str, set[str]] = {}
    for row in re.findall(r"^\| `(bgbias/[^`]+)` \| (.+?) \|", section, flags=re.MULTILINE):
        allowed[row[0]] = set(re.findall(r"`([\w.]+)`", row[1]))
    return allowed


def _imports_in_functions(path: Path) -> list[tuple[int, str]]:
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, ast.Import):
                found.extend((child.lineno, alias.name.split(".")[0]) for alias in child.names)
            elif in_function and isinstance(child, ast.ImportFrom):
                found.append((child.lineno, "." * child.level + (child.module or "").split(".")[0]))
            visit(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef))

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return found


@pytest.mark.slow
def test_every_import_inside_a_function_is_a_documented_exception():
    allowed = _documented()
    assert "bgbias/data/cars.py" in allowed and allowed["bgbias/data/cars.py"] == {"scipy"}
    stray = []
    for path in sorted((ROOT / "bgbias").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name.startswith("bgbias/cli/") or name == "bgbias/__init__.py":
            continue
        stray += [f"{name}:{line} imports {module}" for line, module in _imports_in_functions(path)
                  if module not in allowed.get(name, set())]
    assert stray == []


def test_every_documented_exception_still_exists():
    """A row whose import has gone is stale: the table says only what is true."""
    for name, modules in _documented().items():
        if name.endswith("*") or name == "bgbias/__init__.py":
            continue
        used = {module for _, module in _imports_in_functions(ROOT / name)}
        assert modules <= used, f"{name}: {sorted(modules - used)} no longer imported inside a function"
