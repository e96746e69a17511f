"""`bgbias report` says when the runs it compares were trained or scored under different installations."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from bgbias.cli import main
from bgbias.installation import installation
from bgbias.report.installations import result_installations
from bgbias.report.runs_table import collect_runs


@pytest.fixture(scope="module")
def evaluated(tiny_run, tmp_path_factory) -> list[Path]:
    """Two copies of the tiny run, the second labelled a BGAugment run so that a table takes both, each scored
    on its clean test split under this installation."""
    base = tmp_path_factory.mktemp("installations")
    runs = []
    for name in ("a", "b"):
        run = base / name
        shutil.copytree(tiny_run, run)
        if name == "b":
            _edit(run / "config.json", lambda config: config["bgaugment"].update(enabled=True))
        result = CliRunner().invoke(main, ["eval", "--checkpoint", str(run), "--device", "cpu",
                                           "--no-progress", "--workers", "0"])
        assert result.exit_code == 0, result.output
        runs.append(run)
    return runs


def _copies(evaluated, tmp_path) -> list[Path]:
    return [Path(shutil.copytree(run, tmp_path / run.name)) for run in evaluated]


def _edit(path: Path, change) -> None:
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))


def test_training_and_evaluation_record_this_installation(evaluated):
    run = evaluated[0]
    assert json.loads((run / "run.json").read_text())["installation"] == installation()
    (report,) = run.glob("eval/*/report.json")
    assert json.loads(report.read_text())["installation"] == installation()


def test_one_installation_adds_nothing(evaluated, tmp_path):
    result = CliRunner().invoke(main, ["report", "--out", str(tmp_path / "out"), *map(str, evaluated)])
    assert result.exit_code == 0, result.output
    assert "warning" not in result.output
    assert "Installations" not in (tmp_path / "out" / "table.md").read_text()


def test_another_numpy_under_one_evaluation_is_named_on_the_page_and_the_terminal(evaluated, tmp_path):
    a, b = _copies(evaluated, tmp_path)
    (report,) = b.glob("eval/*/report.json")
    _edit(report, lambda r: r["installation"]["packages"].update(numpy="0.0.1"))
    result = CliRunner().invoke(main, ["report", "--out", str(tmp_path / "out"), str(a), str(b)])
    assert result.exit_code == 0, result.output
    table = (tmp_path / "out" / "table.md").read_text()
    version = installation()["packages"]["numpy"]
    line = f"numpy: 0.0.1 (b (evaluation of {report.parent.name})); {version} (a, b (training))"
    assert "## Installations" in table and line in table, table
    assert "warning:" in result.output and "numpy: 0.0.1" in result.output


def test_a_run_from_before_installations_were_recorded_is_named(evaluated, tmp_path):
    a, b = _copies(evaluated, tmp_path)
    _edit(b / "run.json", lambda r: r.pop("installation"))
    (report,) = b.glob("eval/*/report.json")
    _edit(report, lambda r: r.pop("installation"))
    reports, _ = collect_runs([a, b])
    assert result_installations(reports) == {"a": installation(), "b": None}
    result = CliRunner().invoke(main, ["report", "--out", str(tmp_path / "out"), str(a), str(b)])
    assert "not recorded (the result's record is missing or damaged): b" in result.output
