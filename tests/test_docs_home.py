"""docs/index.md, the site's home page, is README.md's front page as scripts/docs_home.py writes it (issue
46: a visitor of the site never saw the set-up, the quick starts or the headline result): a README edited
without the page being rewritten fails here, and so does a README link the site could not follow."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
docs_home = load_script("scripts/docs_home.py")

README = """\
# tool

Set up: [docs/install.md](docs/install.md#gpu-builds), from Python [the API](docs/api.md); a whole loop:
[examples/train_with_bgaugment.py](examples/train_with_bgaugment.py), under the [licence](LICENSE), as
`[written](docs/install.md)`, on [the web](https://example.org) and [above](#tool).

![a chart](docs/images/full-over-seeds.png)

<!-- run: readme-thing -->
```bash
echo "[docs/install.md](docs/install.md)"
```

## Documentation

- [docs/install.md](docs/install.md)
"""


def test_the_home_page_is_what_the_script_writes(capsys):
    assert docs_home.main(["--check"]) == 0, capsys.readouterr().err


def test_the_home_page_is_the_readme_front_page_then_the_guide_to_the_pages():
    page = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    headings = [line for line in page.splitlines() if line.startswith("## ")]
    assert headings == ["## Two commands", "## Quick starts", "## The headline result", "## Status",
                        "## These pages"]
    assert readme.split("\n\n")[1] in page  # what bgbias answers and for whom
    assert "bash scripts/setup.sh && .venv/bin/bgbias study\n" in page
    assert "### Audit your own model" in page and "### BGAugment in your own training loop" in page
    assert "<!-- table full-study/table1.json " in page and "](images/full-over-seeds.png)" in page
    assert "| where | verified | not yet |" in page
    assert "](docs/" not in page and "<!-- run: " not in page
    assert "[Command line](cli.md)" in page.split("## These pages")[1]


def test_the_guide_links_every_page_of_the_site_s_menu():
    linked = set(re.findall(r"\]\(([^)#]+)", docs_home.GUIDE))
    assert set(docs_home.menu_titles()) - linked == {"index.md"}


def test_links_are_rewritten_for_the_site_and_code_is_left_as_written(tmp_path):
    readme, page = tmp_path / "README.md", tmp_path / "index.md"
    readme.write_text(README, encoding="utf-8")
    assert docs_home.main([], page=page, readme=readme) == 0
    written = page.read_text(encoding="utf-8")
    front, guide = written.split("\n## These pages\n")
    assert front.endswith(
        "# tool\n\n"
        "Set up: [Installing](install.md#gpu-builds), from Python [the API](api.md); a whole loop:\n"
        "`examples/train_with_bgaugment.py`, under the licence (`LICENSE`), as\n"
        "`[written](docs/install.md)`, on [the web](https://example.org) and [above](#tool).\n\n"
        "![a chart](images/full-over-seeds.png)\n\n"
        "<!-- not run: the same block of README.md, run there as readme-thing by tests/test_readme.py -->\n"
        "```bash\n"
        'echo "[docs/install.md](docs/install.md)"\n'
        "```\n")
    assert "Documentation" not in written and guide == docs_home.GUIDE
    assert docs_home.main(["--check"], page=page, readme=readme) == 0


def test_the_check_names_the_first_line_that_differs_and_the_fix(tmp_path, capsys):
    readme, page = tmp_path / "README.md", tmp_path / "index.md"
    readme.write_text(README, encoding="utf-8")
    docs_home.main([], page=page, readme=readme)
    readme.write_text(README.replace("a whole loop", "a loop"), encoding="utf-8")
    assert docs_home.main(["--check"], page=page, readme=readme) == 1
    err = capsys.readouterr().err
    assert "index.md:4: differs from what scripts/docs_home.py writes from README.md" in err
    assert "fix: run `.venv/bin/python scripts/docs_home.py` and commit docs/index.md" in err
    page.unlink()
    assert docs_home.main(["--check"], page=page, readme=readme) == 1
    assert "index.md: it does not exist" in capsys.readouterr().err


@pytest.mark.parametrize(("change", "message"), [
    (("docs/api.md", "docs/apu.md"), "README.md links docs/apu.md, which is not in the repository"),
    (("docs/images/full-over-seeds.png", "LICENSE"),
     "README.md shows the picture LICENSE, which is outside docs/"),
    (("## Documentation", "## Docs"), "README.md has no `## Documentation` section"),
])
def test_a_readme_the_site_could_not_show_is_refused_naming_the_fix(tmp_path, capsys, change, message):
    readme, page = tmp_path / "README.md", tmp_path / "index.md"
    readme.write_text(README.replace(*change), encoding="utf-8")
    assert docs_home.main([], page=page, readme=readme) == 1
    assert message in capsys.readouterr().err
    assert not page.exists()
