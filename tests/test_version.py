"""One version (issue 35 item 5): ``pyproject.toml``'s, read back from the installed distribution's metadata,
is what ``bgbias --version`` prints and what every record of bgbias's own version stores."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from click.testing import CliRunner

import bgbias
from bgbias.cli import main
from bgbias.installation import installed_requirements

REPO = Path(__file__).resolve().parents[1]
DECLARED = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
"""``pyproject.toml``'s ``[project] version``, the one place it is set."""


def test_bgbias_version_prints_the_installed_version():
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"bgbias {metadata.version('bgbias')}\n"


def test_the_installed_version_is_pyprojects_and_the_records_store_it():
    assert metadata.version("bgbias") == DECLARED, (
        "the installed metadata is older than pyproject.toml: run bash scripts/setup.sh again")
    assert bgbias.__version__ == DECLARED
    assert installed_requirements()["bgbias"] == DECLARED  # run.json's and report.json's installation


def test_a_checkout_that_is_not_installed_reads_its_pyproject(tmp_path, monkeypatch):
    def not_installed(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    monkeypatch.setattr(bgbias, "__file__", str(tmp_path / "bgbias" / "__init__.py"))
    assert bgbias._version() == "0+unknown"  # a package folder copied on its own
    pyproject = '[project]\nname = "bgbias"\nversion = "9.8.7"\n'
    (tmp_path / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    assert bgbias._version() == "9.8.7"


def test_the_changelog_describes_the_version():
    """A version is set with its CHANGELOG entry: the newest release there is pyproject.toml's."""
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.findall(r"^## \[(\d[^\]]*)\] - \d{4}-\d{2}-\d{2}$", changelog, re.MULTILINE)
    assert releases and releases[0] == DECLARED, (
        f"CHANGELOG.md's newest release is {releases[:1]}, pyproject.toml's version {DECLARED}: "
        "add its entry")
