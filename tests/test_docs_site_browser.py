"""The docs site as a visitor's browser shows it, in headless Chromium (tests/report/chromium.py): on the home
page, a page of long command lines and a page of wide tables, at a laptop's width and a narrow one, every code
block's lines can be reached (the block fits, or scrolls sideways) and nothing is wider than the window but
the inside of a sideways-scrolling box (issue 46: long code lines were cut at the box's edge)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs_blocks import ROOT, code_blocks
from tests.report.chromium import NAMES, find_chromium, inspect_page

pytestmark = [
    pytest.mark.slow,
    pytest.mark.required_in_ci,
    pytest.mark.skipif(find_chromium() is None, reason=(
        f"no Chromium on PATH ({', '.join(NAMES)}): install it (Debian: apt-get install -y "
        "--no-install-recommends chromium) to check the docs site in a browser")),
]

PAGES = {"docs/index.md": "index.html", "docs/study.md": "study/index.html",
         "docs/results.md": "results/index.html"}
"""Each page checked, by the file the site builds from it: the home page, long command lines, wide tables."""
SCROLLS = ("auto", "scroll")
CLIPS = ("hidden", "clip")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The docs site as `mkdocs build --strict` writes it."""
    folder = tmp_path_factory.mktemp("site")
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    return folder


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("width", [1280, 600])
def test_every_code_line_and_table_of_a_docs_page_can_be_reached(site, page, width):
    shown = inspect_page(site / PAGES[page], width=width).probe
    blocks = shown["codeBlocks"]
    assert len(blocks) == len(code_blocks(page))
    for block in blocks:
        pre, code = block["pre"], block["code"]
        # The box shows its lines whole or scrolls sideways; the code inside it never clips them.
        assert pre["scrollWidth"] <= pre["clientWidth"] or pre["overflowX"] in SCROLLS, block["text"]
        assert code["scrollWidth"] <= code["clientWidth"] or code["overflowX"] not in CLIPS, block["text"]
    assert shown["overflowing"] == []
    assert shown["pageWidth"] == shown["viewport"]
    for image in shown["images"]:
        assert image["decoded"] and image["shown"] <= min(image["width"], width), image["alt"]
