"""Faults a user's machine produces, injected on purpose: read-only folders, outputs under files, damaged
records, processes killed at random points, concurrent runs. Each must end in a clear ``error:`` (exit 2,
the file named, no traceback) or in the same bytes as an undisturbed run, never in a silent wrong result."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from bgbias.cli import main
from bgbias.errors import OutputError
from bgbias.fileio import write_text_atomic


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[Path]:
    """``folder`` and what it holds made read-only for this process, then writable again.

    A normal user gets the permission bits; root, whom permission bits do not stop, gets a copy of the folder
    on a read-only tmpfs mounted over it (skipped where this machine allows no mount)."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        modes = {path: path.stat().st_mode for path in [folder, *folder.rglob("*")]}
        for path in modes:
            path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield folder
        finally:
            for path, mode in modes.items():
                path.chmod(mode)
        return
    aside = folder.with_name(folder.name + ".contents")
    shutil.copytree(folder, aside)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(folder)],
                             capture_output=True)
    if mounted.returncode != 0:
        shutil.rmtree(aside)
        pytest.skip("root cannot mount a read-only folder here")
    try:
        shutil.copytree(aside, folder, dirs_exist_ok=True)
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True, capture_output=True)
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True, capture_output=True)
        shutil.rmtree(aside)


def _assert_clear_error(result, *words: str) -> None:
    assert result.exit_code == 2, result.output
    assert "error:" in result.output and "Traceback" not in result.output
    for word in words:
        assert word in result.output, result.output


def _train_args(tiny_bench: Path, *extra: str) -> list[str]:
    return ["train", "--method", "triplet", "--root", str(tiny_bench / "bench"), "--epochs", "1",
            "--device", "cpu", "--workers", "0", "--no-progress", "--set", "model.pretrained=false",
            "--set", "data.crop=32", "--set", "data.batch_size=8", "--set", "data.m_per_class=2", *extra]


# ------------------------------------------------------------------------------------- read-only outputs
def test_writing_into_a_read_only_folder_is_an_output_error(tmp_path):
    with read_only(tmp_path / "out") as out, pytest.raises(OutputError, match="cannot write here") as info:
        write_text_atomic(out / "sub" / "file.txt", "x")
    assert info.value.path.startswith(str(out))


def test_writing_below_a_file_is_an_output_error(tmp_path):
    (tmp_path / "file").write_text("in the way")
    with pytest.raises(OutputError, match="a file stands where a folder is needed"):
        write_text_atomic(tmp_path / "file" / "sub" / "out.json", "{}")


def test_train_into_a_read_only_runs_folder(tiny_bench, tmp_path):
    with read_only(tmp_path / "runs") as runs:
        result = CliRunner().invoke(main, _train_args(tiny_bench, "--run-dir", str(runs / "run")))
    _assert_clear_error(result, "cannot write here", str(runs))


def test_train_with_a_run_folder_below_a_file(tiny_bench, tmp_path):
    (tmp_path / "file").write_text("in the way")
    result = CliRunner().invoke(main, _train_args(tiny_bench, "--run-dir", str(tmp_path / "file" / "run")))
    _assert_clear_error(result, "a file stands where a folder is needed")


def test_eval_of_a_read_only_run(tiny_run, tmp_path):
    shutil.copytree(tiny_run, tmp_path / "runs" / "run")
    with read_only(tmp_path / "runs") as runs:
        result = CliRunner().invoke(main, ["eval", "--checkpoint", str(runs / "run"), "--workers", "0",
                                           "--device", "cpu", "--no-progress"])
    _assert_clear_error(result, "cannot write here", str(runs / "run" / "eval"))


def test_report_into_a_folder_below_a_file(tiny_run, tmp_path):
    (tmp_path / "file").write_text("in the way")
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    assert CliRunner().invoke(main, ["eval", "--checkpoint", str(run), "--workers", "0", "--device", "cpu",
                                     "--no-progress"]).exit_code == 0
    result = CliRunner().invoke(main, ["report", str(run), "--out", str(tmp_path / "file" / "report")])
    _assert_clear_error(result, "a file stands where a folder is needed")


def test_bench_built_below_a_file(tmp_path):
    from bgbias.backgrounds.pool import assign_families
    from bgbias.bench.build import build_bench
    from tests.backgrounds.test_pool import make_sources
    from tests.bench.test_stamps import make_stamps_tree

    stamps = make_stamps_tree(tmp_path / "stamps")
    scenes = assign_families(make_sources(tmp_path / "sources", photos=5, patterns=4))["bench"]
    (tmp_path / "file").write_text("in the way")
    with pytest.raises(OutputError, match="a file stands where a folder is needed"):
        build_bench(tmp_path / "file" / "bench", stamps, scenes, seed=0, workers=1)


# ------------------------------------------------------------------------------------- damaged records
def test_a_damaged_run_record_makes_the_study_resume_the_run(tmp_path, monkeypatch):
    from bgbias import study

    run = tmp_path / "study" / "multi_similarity"
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}")
    (run / "run.json").write_text('{"status": "finish')  # torn by a kill
    resumed = []
    monkeypatch.setattr("bgbias.engine.training.resume_training", resumed.append)
    assert study.train_study_run(tmp_path / "study", False, "cpu", lambda _: None, "5/7") == run
    assert resumed == [run]


def test_a_damaged_run_record_does_not_stop_evaluation(tiny_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    (run / "run.json").write_text("\x00garbage")
    result = CliRunner().invoke(main, ["eval", "--checkpoint", str(run), "--workers", "0", "--device", "cpu",
                                       "--no-progress"])
    assert result.exit_code == 0, result.output
    assert json.loads(next(run.glob("eval/*/report.json")).read_text())["same_dataset_as_training"] is None
