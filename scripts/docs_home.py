"""Write docs/index.md, the docs site's home page, from README.md, so that a visitor of the site reads the
repository's front page (what bgbias answers and for whom, the set-up, the quick starts, the headline
result, the status) and the two cannot drift apart (issue 46). After editing the README, rewrite the page
and commit it:

    .venv/bin/python scripts/docs_home.py            # rewrites docs/index.md
    .venv/bin/python scripts/docs_home.py --check    # exit status 1, naming the first line that differs

The page is the README up to its ``## Documentation`` section (the site has its menu instead), then GUIDE,
the guide to the site's pages. Outside code, the README's links are rewritten for the site: a page or picture
under docs/ is linked from docs/ (``docs/x.md`` → ``x.md``, a link whose text is the path taking the page's
title in the site's menu), a file outside docs/, which the site does not hold, becomes its path in code, and a
block's ``<!-- run: ID -->`` marker says that the README's block is the one that runs (the site's is not).
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGE = ROOT / "docs" / "index.md"
END = "\n## Documentation\n"
"""The README's section listing the docs pages: the site lists them in its menu and in GUIDE instead."""
HEADER = "<!-- Written from README.md by scripts/docs_home.py: edit README.md, then run the script. -->\n"
GUIDE = """\

Beyond this front page, these pages hold the rest:

- getting started: [Installing](install.md) (the set-up, pip, GPU builds, where files go) and every command
  in one list, [Commands](commands.md);
- the guides: [Datasets and background pools](datasets.md), [Masks and corrupted test sets](masks.md),
  [Training](training.md), [Evaluation, reports and explanations](evaluation.md) and
  [Models bgbias did not train](models.md);
- the protocol, the pipeline and the layers: [Design and protocol](design.md);
- the synthetic dataset every default runs on: [The bench dataset](bench-dataset.md);
- the whole comparison in one command: [The study](study.md);
- before training, how much of the class a dataset's backgrounds give away: [Background leakage](leakage.md);
- models bgbias did not train, scored side by side: [Auditing outside encoders](audit.md);
- the bundled methods: [DCML](methods/dcml.md), [SAM](methods/sam.md),
  [MetricFormer](methods/metricformer.md), [AVSL](methods/avsl.md);
- every command and its options, as `--help` prints them: [Command line](cli.md);
- from Python: [the API](api.md), [your own embeddings](embeddings.md) and the
  [API reference](reference.md);
- what was measured: [Results](results.md), [Benchmarks](benchmarks.md); where it runs:
  [Hardware](hardware.md), [Offline assets](offline.md); what was verified where: [Status](status.md);
- changing bgbias: [Contributing](contributing.md).
"""
FIX = "run `.venv/bin/python scripts/docs_home.py` and commit docs/index.md"

# One pass over the README: code (a fenced block or an inline span) is kept as written; a run marker or a link
# outside code is rewritten for the site.
_PIECE = re.compile(
    r"(?P<code>^[ \t]*(?P<fence>`{3,}|~{3,})[^\n]*\n.*?^[ \t]*(?P=fence)[ \t]*$|`[^`\n]+`)"
    r"|^(?P<indent>[ ]*)<!-- run: (?P<run_id>[a-z0-9-]+) -->$"
    r"|(?P<image>!?)\[(?P<text>[^\]\n]*)\]\((?P<target>[^)\s]+)\)",
    re.M | re.S)
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*:")


class HomePageError(ValueError):
    """The README holds what the site's home page cannot show: a link to nothing, a picture outside docs/."""


def render(readme_text: str) -> str:
    """The home page: HEADER, the README up to its ``## Documentation`` section rewritten for the site, then
    the ``## These pages`` section, GUIDE."""
    front, found, _ = readme_text.partition(END)
    if not found:
        raise HomePageError(f"README.md has no `{END.strip()}` section: the home page holds the README up to "
                            "it; keep the section (the README's list of the docs pages) after the status")
    return HEADER + _PIECE.sub(_for_the_site, front).rstrip("\n") + "\n\n## These pages\n" + GUIDE


def _for_the_site(piece: re.Match) -> str:
    if piece["code"] is not None:
        return piece["code"]
    if piece["run_id"] is not None:
        return (f"{piece['indent']}<!-- not run: the same block of README.md, run there as {piece['run_id']} "
                "by tests/test_readme.py -->")
    return _site_link(piece["text"], piece["target"], image=bool(piece["image"]))


def _site_link(text: str, target: str, *, image: bool) -> str:
    """A README link (or picture) as the site's home page, in docs/, writes it."""
    if _SCHEME.match(target) or target.startswith("#"):
        return f"{'!' if image else ''}[{text}]({target})"
    path, _, anchor = target.partition("#")
    if not (ROOT / path).exists():
        raise HomePageError(f"README.md links {path}, which is not in the repository: fix the link")
    if path.startswith("docs/"):
        site_path = path.removeprefix("docs/")
        if text == path and not image:
            text = menu_titles().get(site_path, site_path)
        return f"{'!' if image else ''}[{text}]({site_path}{'#' + anchor if anchor else ''})"
    if image:
        raise HomePageError(f"README.md shows the picture {path}, which is outside docs/, where the site "
                            "cannot show it: move it under docs/images/ and show it from there")
    return f"`{path}`" if text == path else f"{text} (`{path}`)"


@functools.cache
def menu_titles() -> dict[str, str]:
    """Each page's title in the site's menu (mkdocs.yml's nav), by its path under docs/."""
    def walk(entries: list) -> dict[str, str]:
        titles: dict[str, str] = {}
        for entry in entries:
            for title, value in entry.items():
                titles.update(walk(value) if isinstance(value, list) else {value: title})
        return titles

    return walk(yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"])


def main(argv: list[str] | None = None, page: Path = PAGE, readme: Path = README) -> int:
    """Write ``page`` from ``readme``, or with ``--check`` print where it differs and return 1 when it is not
    up to date; a README the site cannot show returns 1 naming what to fix."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit status 1 when the page is not what the script writes")
    args = parser.parse_args(argv)
    try:
        rendered = render(readme.read_text(encoding="utf-8"))
    except HomePageError as error:
        print(error, file=sys.stderr)
        return 1
    if not args.check:
        page.write_text(rendered, encoding="utf-8")
        return 0
    shown = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
    if not page.is_file():
        problem = f"{shown}: it does not exist"
    else:
        written = page.read_text(encoding="utf-8")
        if written == rendered:
            return 0
        pairs = zip([*written.splitlines(), ""], [*rendered.splitlines(), ""], strict=False)
        line = next((number for number, (old, new) in enumerate(pairs, 1) if old != new),
                    len(written.splitlines()) + 1)
        problem = f"{shown}:{line}: differs from what scripts/docs_home.py writes from README.md"
    print(f"{problem}\nfix: {FIX}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
