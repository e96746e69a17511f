"""docs/cli.md is the ``--help`` of every ``bgbias`` command as scripts/docs_cli.py writes it: a command whose
options or help text changed without the page being rewritten fails here, naming the command and the fix."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from bgbias.cli import main as bgbias_main
from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
docs_cli = load_script("scripts/docs_cli.py")


def test_the_page_is_what_the_script_writes(capsys):
    assert docs_cli.main(["--check"]) == 0, capsys.readouterr().err


def test_every_command_has_its_help_as_a_user_sees_it():
    helps = dict(docs_cli.command_helps())
    assert list(helps)[:3] == ["bgbias", "bgbias assets", "bgbias assets backgrounds"]
    assert {"bgbias study", "bgbias assets fetch", "bgbias train"} <= set(helps)
    typed = CliRunner().invoke(bgbias_main, ["assets", "fetch", "--help"], prog_name="bgbias",
                               terminal_width=docs_cli.WIDTH)
    assert helps["bgbias assets fetch"] + "\n" == typed.output
    assert "-h, --help" in helps["bgbias train"]  # the root's settings reach every command


def test_the_check_names_the_command_that_differs_and_the_fix(tmp_path, capsys):
    page = tmp_path / "cli.md"
    assert docs_cli.main([], page=page) == 0
    written = page.read_text(encoding="utf-8")
    assert written == docs_cli.render()
    assert "## bgbias study\n\n<!-- not run: help text -->\n```text\nUsage: bgbias study" in written
    page.write_text(written.replace("--preset", "--old-preset", 1), encoding="utf-8")
    assert docs_cli.main(["--check"], page=page) == 1
    err = capsys.readouterr().err
    assert "`bgbias assets bench`: its help differs" in err
    assert "fix: run `.venv/bin/python scripts/docs_cli.py`" in err
    page.write_text(written.replace("\n## bgbias study\n", "\n## bgbias stduy\n"), encoding="utf-8")
    assert docs_cli.main(["--check"], page=page) == 1
    err = capsys.readouterr().err
    assert "`bgbias study`: missing" in err and "`bgbias stduy`: no such command" in err
