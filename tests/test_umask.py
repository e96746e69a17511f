"""Outputs follow the user's umask, as any tool's do: a file written atomically (through a private temporary
file) gets the mode a plainly created one would, and so does a folder swapped in whole."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

from bgbias.cli import main


@contextmanager
def umask(mask: int) -> Iterator[None]:
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


def _wrong_modes(folder: Path, mask: int) -> list[str]:
    """Every entry below ``folder`` whose permission bits are not what ``mask`` gives a new one."""
    wrong = []
    for path in [folder, *folder.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        expected = (0o777 if path.is_dir() else 0o666) & ~mask
        if mode != expected:
            wrong.append(f"{path.relative_to(folder)}: {oct(mode)}, not {oct(expected)}")
    return wrong


@pytest.mark.slow
@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002], ids=["022", "077", "002"])
def test_every_output_of_train_eval_and_report_follows_the_umask(tiny_bench, tmp_path, mask):
    out = tmp_path / "out"
    run, report = out / "runs" / "run", out / "report"
    with umask(mask):
        trained = CliRunner().invoke(main, [
            "train", "--method", "triplet", "--root", str(tiny_bench / "bench"), "--epochs", "1",
            "--device", "cpu", "--workers", "0", "--no-progress", "--backbone", "tiny_cnn",
            "--set", "model.pretrained=false", "--set", "data.crop=32", "--set", "data.batch_size=8",
            "--set", "data.m_per_class=2", "--run-dir", str(run)])
        assert trained.exit_code == 0, trained.output
        evaluated = CliRunner().invoke(main, ["eval", "--checkpoint", str(run), "--workers", "0", "--device",
                                              "cpu", "--no-progress"])
        assert evaluated.exit_code == 0, evaluated.output
        reported = CliRunner().invoke(main, ["report", str(run), "--out", str(report)])
        assert reported.exit_code == 0, reported.output
    assert {"config.json", "run.json", "last.pt", "report.json", "table.md"} <= {
        path.name for path in out.rglob("*")}
    assert _wrong_modes(out, mask) == []


def test_a_folder_swapped_in_whole_follows_the_umask(tmp_path):
    from bgbias.fileio import atomic_dir

    with umask(0o027), atomic_dir(tmp_path / "built") as folder:
        (folder / "file").write_text("x")
    assert stat.S_IMODE((tmp_path / "built").stat().st_mode) == 0o750
