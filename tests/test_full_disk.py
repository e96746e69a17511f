"""A full disk, injected writer by writer: each must end in ``error: no space left on the device`` naming the
file it could not write (exit 2, no traceback), and a training that stops on it says "failed" in its record
with the reason, when the record itself can still be written."""

from __future__ import annotations

import builtins
import errno
import fnmatch
import io
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from bgbias.cli import main
from bgbias.errors import OutputError

NO_SPACE = "no space left on the device"


class _NoSpace:
    """A file open for writing whose writes fail as on a full disk (and then call ``filled``)."""

    def __init__(self, handle, filled: Callable[[], None]):
        self._handle = handle
        self._filled = filled

    def write(self, _data):
        self._filled()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self._handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *_exc):
        self._handle.close()


def _target(name: str) -> str:
    """The file a temporary ``.<name>.<random>.tmp`` (``bgbias.fileio.atomic_path``) stands for, else
    ``name``."""
    if name.startswith(".") and name.endswith(".tmp"):
        return name[1:-4].rpartition(".")[0]
    return name


@pytest.fixture
def disk_full(monkeypatch) -> Callable[..., None]:
    """``disk_full(pattern, ..., then_all=False)``: from then on, writing a file whose name (or whose
    temporary's target) matches a pattern fails with ENOSPC, whoever opens it (bgbias, torch, PIL,
    TensorBoard's thread); ``then_all``: once one such write failed, every later write fails too."""
    patterns: list[str] = []
    real_open = io.open

    def guarded_open(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        if isinstance(file, str | bytes | os.PathLike) and set(mode) & set("wax+"):
            name = _target(os.fsdecode(Path(os.fsdecode(file)).name))
            if any(fnmatch.fnmatch(name, pattern) for pattern in patterns):
                return _NoSpace(handle, lambda: patterns.append("*") if filling_all else None)
        return handle

    filling_all = False

    def fill(*names: str, then_all: bool = False) -> None:
        nonlocal filling_all
        patterns.extend(names)
        filling_all = then_all

    monkeypatch.setattr(builtins, "open", guarded_open)
    monkeypatch.setattr(io, "open", guarded_open)
    return fill


def _assert_no_space(result, *words: str) -> None:
    assert result.exit_code == 2, result.output
    assert f"error: {NO_SPACE}" in result.output and "Traceback" not in result.output, result.output
    for word in words:
        assert word in result.output, result.output


def _train_args(tiny_bench: Path, run: Path, *extra: str) -> list[str]:
    return ["train", "--method", "triplet", "--root", str(tiny_bench / "bench"), "--epochs", "1",
            "--device", "cpu", "--workers", "0", "--no-progress", "--backbone", "tiny_cnn",
            "--set", "model.pretrained=false", "--set", "data.crop=32", "--set", "data.batch_size=8",
            "--set", "data.m_per_class=2", "--run-dir", str(run), *extra]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("full", "named", "extra"),
    [
        (("best.pt",), "checkpoints/best.pt", ()),  # torch.save into the checkpoint
        (("curves.png",), "curves.png", ()),  # matplotlib's figure
        (("metrics.jsonl",), "metrics.jsonl", ()),
        (("train.log",), "train.log", ()),  # appended line by line
        (("events.out.tfevents.*",), "tensorboard", ("--set", "log.tensorboard=true")),  # a writer thread
    ],
    ids=["checkpoint", "curves", "metrics", "log", "tensorboard"],
)
def test_training_on_a_full_disk_fails_clearly_and_says_so_in_its_record(tiny_bench, tmp_path, disk_full,
                                                                         full, named, extra):
    run = tmp_path / "run"
    disk_full(*full)
    result = CliRunner().invoke(main, _train_args(tiny_bench, run, *extra))
    _assert_no_space(result, str(run / named))
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "failed" and NO_SPACE in record["error"] and named in record["error"]


def test_a_record_that_cannot_be_written_either_leaves_the_first_error_to_say_why(tiny_bench, tmp_path,
                                                                                   disk_full):
    run = tmp_path / "run"
    disk_full("best.pt", then_all=True)
    result = CliRunner().invoke(main, _train_args(tiny_bench, run))
    _assert_no_space(result, str(run / "checkpoints" / "best.pt"))
    assert "run.json" not in result.output


@pytest.mark.parametrize(("full", "named"), [("*.npz", "eval/cache"), ("report.json", "report.json"),
                                             ("report.md", "report.md")],
                         ids=["embedding-cache", "report", "markdown"])
def test_evaluation_on_a_full_disk(tiny_run, tmp_path, disk_full, full, named):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    disk_full(full)
    result = CliRunner().invoke(main, ["eval", "--checkpoint", str(run), "--workers", "0", "--device", "cpu",
                                       "--no-progress"])
    _assert_no_space(result, named)


def test_explanation_maps_on_a_full_disk(tiny_run, tiny_bench, tmp_path, disk_full):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    disk_full("*.png")  # the maps PIL encodes, then the gallery
    result = CliRunner().invoke(main, ["explain", "--checkpoint", str(run), "--device", "cpu", "--limit", "2",
                                       "--masks", str(tiny_bench / "masks"), "--no-progress"])
    _assert_no_space(result, str(run / "explain"))


@pytest.mark.parametrize(("full", "named"), [("*.png", ".png"), ("shard-0-of-1.jsonl", "shard-0-of-1.jsonl")],
                         ids=["mask", "ledger"])
def test_masks_on_a_full_disk(tiny_bench, tmp_path, disk_full, monkeypatch, full, named):
    from bgbias.saliency import pipeline
    from tests.saliency.fakes import FakeSession

    monkeypatch.setattr(pipeline, "open_session", lambda *_args, **_options: FakeSession())
    disk_full(full)
    result = CliRunner().invoke(main, ["masks", "--dataset", "bench", "--root", str(tiny_bench / "bench"),
                                       "--out", str(tmp_path / "masks")])
    _assert_no_space(result, named)


def test_rendered_images_on_a_full_disk(tiny_bench, tmp_path, disk_full):
    disk_full("*.png")
    result = CliRunner().invoke(main, [
        "corrupt", "--dataset", "bench", "--root", str(tiny_bench / "bench"), "--repeats", "1",
        "--backgrounds", str(tiny_bench / "backgrounds"), "--masks", str(tiny_bench / "masks"),
        "--out", str(tmp_path / "manifests"), "--render", str(tmp_path / "rendered")])
    _assert_no_space(result, str(tmp_path / "rendered"))


def test_the_bench_built_on_a_full_disk(tmp_path, disk_full):
    from bgbias.backgrounds.pool import assign_families
    from bgbias.bench.build import build_bench
    from tests.backgrounds.test_pool import make_sources
    from tests.bench.test_stamps import make_stamps_tree

    stamps = make_stamps_tree(tmp_path / "stamps")
    scenes = assign_families(make_sources(tmp_path / "sources", photos=5, patterns=4))["bench"]
    disk_full("*.jpg")
    with pytest.raises(OutputError, match=NO_SPACE) as caught:
        build_bench(tmp_path / "bench", stamps, scenes, seed=0, workers=1)
    assert caught.value.path.endswith(".jpg")
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".bench.")
                and path.suffix == ".tmp"]  # the half-built bench is gone


def test_an_asset_copied_onto_a_full_disk(tmp_path, disk_full):
    from bgbias.assets.digest import copy_with_sha256

    disk_full("weights.onnx")
    with pytest.raises(OutputError, match=NO_SPACE):
        copy_with_sha256(io.BytesIO(b"x" * 100), tmp_path / "weights.onnx")


def test_an_error_a_writer_raises_while_handling_the_full_disk_is_reported_as_the_full_disk(tmp_path,
                                                                                            monkeypatch):
    import torch

    from bgbias.engine.checkpoint import save_checkpoint

    def save(obj, handle):
        # What torch.save does on a real full disk: its zip writer's clean-up replaces the OSError.
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        finally:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 119552 vs 119440")

    monkeypatch.setattr(torch, "save", save)
    with pytest.raises(OutputError, match=NO_SPACE) as caught:
        save_checkpoint(tmp_path / "last.pt", {})
    assert caught.value.path == str(tmp_path / "last.pt")


@pytest.mark.slow
@pytest.mark.parametrize("size", ["100k", "330k"])
def test_training_on_a_really_full_disk(tiny_bench, tmp_path, size):
    """A small tmpfs fills up for real (root only, where mounting is allowed)."""
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small file system here")
    try:
        result = CliRunner().invoke(main, _train_args(tiny_bench, disk / "run", "--epochs", "2"))
        _assert_no_space(result, str(disk / "run"))
        assert json.loads((disk / "run" / "run.json").read_text())["status"] == "failed"
    finally:
        subprocess.run(["umount", str(disk)], check=True)
