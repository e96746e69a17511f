"""The command line: every command answers --help, help stays cheap, user errors print without traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from bgbias.cli import main

HEAVY_MODULES = ("torch", "torchvision", "rembg", "onnxruntime", "faiss", "scipy", "cv2", "albumentations")


def _all_command_paths(group=main, prefix=()):
    for name, cmd in group.commands.items():
        path = (*prefix, name)
        yield path
        if hasattr(cmd, "commands"):
            yield from _all_command_paths(cmd, path)


def test_top_level_help_lists_the_commands():
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for name in ("assets", "datasets", "study"):
        assert name in result.output


@pytest.mark.parametrize("path", list(_all_command_paths()), ids=lambda p: " ".join(p))
def test_every_command_answers_help(path):
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


@pytest.mark.slow
def test_help_imports_no_heavy_library():
    """--help must answer in well under a second; torch & co. take seconds, so they may not load at import."""
    paths = [list(path) for path in _all_command_paths()]
    code = (
        "import sys; from bgbias.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        f"for path in {paths!r}:\n"
        "    try:\n        main([*path, '--help'])\n    except SystemExit:\n        pass\n"
        f"print(sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_user_error_prints_problem_and_fix_without_traceback(tmp_path):
    result = CliRunner().invoke(main, ["datasets", "--dataset", "cub", "--root", str(tmp_path / "nowhere")])
    assert result.exit_code == 2
    assert "error:" in result.output
    assert "fix:" in result.output
    assert "Traceback" not in result.output


def test_data_root_option_points_dataset_commands_at_another_folder(tmp_path, monkeypatch):
    from tests.replicas import make_bench

    monkeypatch.setenv("BGBIAS_DATA", str(tmp_path / "elsewhere"))  # restored after the test
    make_bench(tmp_path / "bench", per_class=2)
    result = CliRunner().invoke(main, ["--data-root", str(tmp_path), "datasets", "--dataset", "bench"])
    assert result.exit_code == 0, result.output
    assert str((tmp_path / "bench").resolve()) in result.output


@pytest.mark.parametrize("args, words", [
    (["--dial", "--rho", "0.5"], "--rho and --dial"),
    (["--dial", "--methods", "triplet,dcml"], "one method, not 2"),
])
def test_the_dial_refuses_what_it_sets_itself_before_any_work(args, words):
    result = CliRunner().invoke(main, ["study", *args])
    assert result.exit_code != 0 and words in result.output
    assert "Traceback" not in result.output


def test_methods_schema_prints_the_json_schema_of_a_run_configuration():
    import json

    from bgbias.engine.config import config_json_schema

    every = CliRunner().invoke(main, ["methods", "--schema"])
    assert every.exit_code == 0, every.output
    assert json.loads(every.output) == config_json_schema()
    dcml = json.loads(CliRunner().invoke(main, ["methods", "--schema", "--method", "dcml"]).output)
    assert "head_norm_group" in dcml["properties"]["loss"]["properties"]
    alone = CliRunner().invoke(main, ["methods", "--method", "dcml"])
    assert alone.exit_code == 2 and "pass --schema too" in alone.output
