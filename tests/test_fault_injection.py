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
            "--device", "cpu", "--workers", "0", "--no-progress", "--backbone", "tiny_cnn",
            "--set", "model.pretrained=false", "--set", "data.crop=32", "--set", "data.batch_size=8",
            "--set", "data.m_per_class=2", *extra]


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
    from bgbias.study.plan import StudyRun
    from bgbias.study.runs import train_study_run
    from bgbias.study.spec import bench_spec

    run = tmp_path / "study" / "multi_similarity-seed0"
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}")
    (run / "run.json").write_text('{"status": "finish')  # torn by a kill
    resumed = []
    monkeypatch.setattr("bgbias.study.runs.resume_training", resumed.append)
    planned = StudyRun("multi_similarity", False, 0)
    spec = bench_spec("small", 0.9, 0, "ground-truth", tmp_path / "pools")
    assert train_study_run(tmp_path / "study", planned, spec, "cpu", lambda _: None) == run
    assert resumed == [run]


def test_a_damaged_run_record_does_not_stop_evaluation(tiny_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    (run / "run.json").write_text("\x00garbage")
    result = CliRunner().invoke(main, ["eval", "--checkpoint", str(run), "--workers", "0", "--device", "cpu",
                                       "--no-progress"])
    assert result.exit_code == 0, result.output
    assert json.loads(next(run.glob("eval/*/report.json")).read_text())["same_dataset_as_training"] is None


# ------------------------------------------------------------------------------ killed and concurrent runs
_SLOW_RENDER = """
import sys, time
from pathlib import Path
import bgbias.corrupted.render as render
from bgbias.corrupted.manifests import load_manifest
from bgbias.data.registry import open_dataset
encoded = render.encoded
# room to be interrupted:
render.encoded = lambda *args, **options: (time.sleep(0.15), encoded(*args, **options))[1]
dataset = open_dataset("bench", sys.argv[1])
manifest = load_manifest(Path(sys.argv[2]), dataset, Path(sys.argv[3]))
render.render_corrupted(dataset, manifest, Path(sys.argv[4]), Path(sys.argv[5]))
"""


@pytest.fixture
def render_inputs(tiny_bench, tmp_path):
    """The tiny bench, one corrupted-set manifest of its test split, and an undisturbed render of it."""
    from bgbias.corrupted.manifests import load_manifest, make_corrupted_manifests
    from bgbias.corrupted.render import render_corrupted
    from bgbias.data.registry import open_dataset

    dataset = open_dataset("bench", tiny_bench / "bench")
    (path,) = make_corrupted_manifests(dataset, repeats=1, backgrounds=tiny_bench / "backgrounds",
                                       out_dir=tmp_path / "manifests")
    manifest = load_manifest(path, dataset, tiny_bench / "backgrounds")
    render_corrupted(dataset, manifest, tiny_bench / "masks", tmp_path / "undisturbed")
    return dataset, manifest, path


def _start_slow_render(tiny_bench, manifest_path, out) -> subprocess.Popen:
    import sys

    args = [sys.executable, "-c", _SLOW_RENDER, str(tiny_bench / "bench"), str(manifest_path),
            str(tiny_bench / "backgrounds"), str(tiny_bench / "masks"), str(out)]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _wait_for_ledger_lines(out: Path, count: int, child: subprocess.Popen) -> None:
    import time

    ledger = out / "render.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and child.poll() is None:
        if ledger.is_file() and len(ledger.read_text().splitlines()) > count:  # the header, then images
            return
        time.sleep(0.02)
    raise AssertionError(f"the render never wrote {count} images: {child.stderr.read().decode()}")


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("draw", [0, 1])
def test_a_render_killed_at_a_random_point_resumes_to_the_undisturbed_bytes(render_inputs, tiny_bench,
                                                                            tmp_path, draw):
    import random
    import signal

    from bgbias.corrupted.render import render_corrupted

    dataset, manifest, manifest_path = render_inputs
    stop_after = random.Random(draw).randint(1, len(manifest.entries) - 2)
    out = tmp_path / "killed"
    child = _start_slow_render(tiny_bench, manifest_path, out)
    _wait_for_ledger_lines(out, stop_after, child)
    child.send_signal(signal.SIGKILL)
    child.wait()
    result = render_corrupted(dataset, manifest, tiny_bench / "masks", out)
    assert result.kept >= stop_after and result.written + result.kept == len(manifest.entries)
    assert _files(out) == _files(tmp_path / "undisturbed")  # no temporaries left, the same bytes


@pytest.mark.slow
def test_a_second_render_into_a_busy_folder_is_refused_and_the_first_completes(render_inputs, tiny_bench,
                                                                               tmp_path):
    from bgbias.corrupted.render import render_corrupted
    from bgbias.errors import BusyError

    dataset, manifest, manifest_path = render_inputs
    out = tmp_path / "shared"
    child = _start_slow_render(tiny_bench, manifest_path, out)
    _wait_for_ledger_lines(out, 1, child)
    with pytest.raises(BusyError, match="another process is rendering"):
        render_corrupted(dataset, manifest, tiny_bench / "masks", out)
    assert child.wait(60) == 0, child.stderr.read().decode()
    assert _files(out) == _files(tmp_path / "undisturbed")


# ------------------------------------------------------------------------------------------ damaged files
def test_a_truncated_checkpoint_is_a_clear_error(tiny_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    best = run / "checkpoints" / "best.pt"
    best.write_bytes(best.read_bytes()[: best.stat().st_size // 2])
    result = CliRunner().invoke(main, ["eval", "--checkpoint", str(run), "--device", "cpu", "--no-progress"])
    _assert_clear_error(result, str(best))


def test_a_hand_edited_manifest_is_a_clear_error(render_inputs, tiny_run, tiny_bench, tmp_path):
    _, _, manifest_path = render_inputs
    manifest_path.write_text(manifest_path.read_text().replace('"flip": false', '"flip": "no"', 1))
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    result = CliRunner().invoke(main, [
        "eval", "--checkpoint", str(run), "--corrupted", "--repeats", "1",
        "--masks", str(tiny_bench / "masks"), "--backgrounds", str(tiny_bench / "backgrounds"),
        "--manifests", str(manifest_path.parent),
        "--workers", "0", "--device", "cpu", "--no-progress"])
    _assert_clear_error(result, str(manifest_path), "flip")


def test_masks_into_a_read_only_folder(tiny_bench, tmp_path, monkeypatch):
    from bgbias.saliency import pipeline
    from tests.saliency.fakes import FakeSession

    monkeypatch.setattr(pipeline, "open_session", lambda *_args, **_options: FakeSession())
    with read_only(tmp_path / "masks") as out:
        result = CliRunner().invoke(main, ["masks", "--dataset", "bench", "--root", str(tiny_bench / "bench"),
                                           "--out", str(out / "bench")])
    _assert_clear_error(result, "cannot write here", str(out))


def test_corrupted_manifests_below_a_file(tiny_bench, tmp_path):
    (tmp_path / "file").write_text("in the way")
    result = CliRunner().invoke(main, ["corrupt", "--dataset", "bench", "--root", str(tiny_bench / "bench"),
                                       "--backgrounds", str(tiny_bench / "backgrounds"), "--repeats", "1",
                                       "--out", str(tmp_path / "file" / "manifests")])
    _assert_clear_error(result, "a file stands where a folder is needed")
