"""The docs build as a site (mkdocs.yml) in strict mode: a page left out of the navigation, a link to a
page or anchor that does not exist, or a reference the API page cannot resolve fails the build, and so this
test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_docs_site_builds_in_strict_mode(tmp_path):
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    pages = {path.relative_to(tmp_path).as_posix() for path in tmp_path.rglob("index.html")}
    assert {"index.html", "leakage/index.html", "audit/index.html", "reference/index.html"} <= pages
    assert "evaluate" in (tmp_path / "reference" / "index.html").read_text(encoding="utf-8")
