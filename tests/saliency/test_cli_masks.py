"""``bgbias masks`` end to end on a tiny bench, with the real u2netp or the fake session: files, quality
report, what the terminal says, exit status."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from click.testing import CliRunner

from bgbias.cli import main
from bgbias.data.items import mask_path
from bgbias.data.registry import open_dataset
from bgbias.errors import EXIT_PARTIAL, DatasetError
from bgbias.saliency import pipeline
from bgbias.saliency.ground_truth import copy_ground_truth_masks
from tests.replicas import make_bench, write_picture
from tests.saliency.fakes import FakeSession


def _run(root, out, monkeypatch, u2netp_file):
    monkeypatch.setenv("U2NET_HOME", str(u2netp_file.parent))
    args = ["masks", "--dataset", "bench", "--root", str(root), "--model", "u2netp", "--out", str(out)]
    return CliRunner().invoke(main, args)


@pytest.mark.slow
def test_masks_command_writes_every_mask_and_prints_quality(tmp_path, monkeypatch, u2netp_file):
    root = make_bench(tmp_path / "bench", train_classes=1, val_classes=1, test_classes=1, per_class=2)
    result = _run(root, tmp_path / "masks", monkeypatch, u2netp_file)
    assert result.exit_code == 0, result.output
    assert "6 written, 0 already done, 0 failed" in result.output
    assert "IoU" in result.output and "overlap" in result.output
    assert len(list((tmp_path / "masks" / "images").rglob("*.png"))) == 6
    again = _run(root, tmp_path / "masks", monkeypatch, u2netp_file)
    assert "0 written, 6 already done" in again.output


@pytest.mark.slow
def test_masks_command_records_a_bad_image_and_exits_non_zero(tmp_path, monkeypatch, u2netp_file):
    root = make_bench(tmp_path / "bench", train_classes=1, val_classes=1, test_classes=1, per_class=2)
    broken = sorted((root / "images").rglob("*.jpg"))[0]
    broken.write_bytes(b"not a jpeg")
    result = _run(root, tmp_path / "masks", monkeypatch, u2netp_file)
    assert result.exit_code == EXIT_PARTIAL
    assert "5 written, 0 already done, 1 failed" in result.output
    assert f"error: 1 of 6 images failed and have no mask:\n  {broken.relative_to(root).as_posix()}: " in (
        result.stderr
    )


def _run_fake(root, out, monkeypatch):
    monkeypatch.setattr(pipeline, "open_session", lambda *_args, **_options: FakeSession())
    args = ["masks", "--dataset", "bench", "--root", str(root), "--out", str(out)]
    return CliRunner().invoke(main, args)


def test_failed_images_are_named_with_reason_and_fix_and_exit_partial(tmp_path, monkeypatch):
    root = make_bench(tmp_path / "bench", train_classes=2, val_classes=1, test_classes=1, per_class=2)
    broken = sorted((root / "images").rglob("*.jpg"))[:7]
    for path in broken:
        path.write_bytes(b"not a jpeg")
    result = _run_fake(root, tmp_path / "masks", monkeypatch)
    assert result.exit_code == EXIT_PARTIAL == 3, result.output
    assert "1 written, 0 already done, 7 failed" in result.stdout
    lines = result.stderr.splitlines()  # after the progress bar
    lines = lines[lines.index("error: 7 of 8 images failed and have no mask:") :]
    named = [line.split(": ")[0].strip() for line in lines[1:] if line.startswith("  images/")]
    assert named == [path.relative_to(root).as_posix() for path in broken[:5]]
    assert "not an image" in result.stderr and "fix: replace it with a valid JPEG" in result.stderr
    assert "... and 2 more" in result.stderr and str(tmp_path / "masks" / "manifest.json") in result.stderr
    assert "Traceback" not in result.output


def test_the_summary_says_which_masks_were_re_made(tmp_path, monkeypatch):
    root = make_bench(tmp_path / "bench", train_classes=1, val_classes=1, test_classes=1, per_class=2)
    assert _run_fake(root, tmp_path / "masks", monkeypatch).exit_code == 0
    write_picture(sorted((root / "images").rglob("*.jpg"))[0], 99)
    result = _run_fake(root, tmp_path / "masks", monkeypatch)
    assert result.exit_code == 0, result.output
    assert "1 written, 5 already done, 0 failed" in result.output
    assert "1 of the written masks were re-made: their image or ground truth had changed" in result.output


def test_help_documents_the_exit_status():
    result = CliRunner().invoke(main, ["masks", "--help"])
    assert f"{EXIT_PARTIAL} when the run finished but some images failed" in " ".join(result.output.split())


def test_ground_truth_masks_are_laid_out_for_every_command(tmp_path, monkeypatch):
    root = make_bench(tmp_path / "bench")
    monkeypatch.chdir(tmp_path)
    args = ["masks", "--dataset", "bench", "--root", str(root), "--model", "ground-truth"]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    dataset = open_dataset("bench", root)
    items, out = dataset.items(), f"masks/{dataset.key}-ground-truth"
    assert f"ground-truth masks in {out}: {len(items)} written, 0 already there" in first.output
    assert f"use them with --masks {out}" in first.output
    for item in items:
        assert mask_path(item, tmp_path / out).read_bytes() == item.ground_truth_mask.read_bytes()
    again = CliRunner().invoke(main, args)
    assert f"0 written, {len(items)} already there" in again.output


def test_ground_truth_masks_of_a_dataset_without_them_are_refused(tmp_path):
    items = open_dataset("bench", make_bench(tmp_path / "bench")).items()
    without = [dataclasses.replace(item, ground_truth_mask=None) for item in items[:2]] + items[2:]
    with pytest.raises(DatasetError, match=r"2 of \d+ images have no ground-truth mask"):
        copy_ground_truth_masks(without, tmp_path / "out")


def _by_model(monkeypatch) -> list[str]:
    """Stand-in sessions named after the model asked for (each its own file digest); the models asked for."""
    from tests.saliency.fakes import fake_info

    asked: list[str] = []

    def session(model, *_args, **_options):
        asked.append(model)
        return FakeSession(fake_info(name=model, md5=f"{len(model):032d}"))

    monkeypatch.setattr(pipeline, "open_session", session)
    return asked


def test_one_default_mask_model_and_a_default_folder_per_model(tmp_path, monkeypatch):
    from bgbias.options import DEFAULT_MASK_MODEL

    root = make_bench(tmp_path / "bench", train_classes=1, val_classes=1, test_classes=1, per_class=2)
    monkeypatch.chdir(tmp_path)
    asked = _by_model(monkeypatch)
    key = open_dataset("bench", root).key
    assert f"[default: {DEFAULT_MASK_MODEL}]" in CliRunner().invoke(main, ["masks", "--help"]).output
    assert CliRunner().invoke(main, ["masks", "--dataset", "bench", "--root", str(root)]).exit_code == 0
    assert asked == [DEFAULT_MASK_MODEL] and (tmp_path / "masks" / key / "manifest.json").is_file()
    other = CliRunner().invoke(main, ["masks", "--dataset", "bench", "--root", str(root), "--model", "u2net"])
    assert other.exit_code == 0, other.output
    assert (tmp_path / "masks" / f"{key}-u2net" / "manifest.json").is_file()


def test_a_default_folder_of_the_other_model_is_named_with_where_its_masks_go_now(tmp_path, monkeypatch):
    root = make_bench(tmp_path / "bench", train_classes=1, val_classes=1, test_classes=1, per_class=2)
    monkeypatch.chdir(tmp_path)
    _by_model(monkeypatch)
    key = open_dataset("bench", root).key
    old = ["masks", "--dataset", "bench", "--root", str(root), "--model", "u2net", "--out", f"masks/{key}"]
    assert CliRunner().invoke(main, old).exit_code == 0  # u2net's masks where the old default put them
    result = CliRunner().invoke(main, ["masks", "--dataset", "bench", "--root", str(root)])
    assert result.exit_code == 2
    assert "holds u2net masks, not u2netp ones" in result.output
    assert "model: 'u2net' there, 'u2netp' now; md5:" in result.output  # each setting with its own values
    assert f"masks/{key}-u2net" in result.output


def test_the_docs_name_the_one_default_mask_model():
    from pathlib import Path

    from bgbias.options import DEFAULT_MASK_MODEL
    from bgbias.saliency.pipeline import make_masks

    assert inspect.signature(make_masks).parameters["model"].default == DEFAULT_MASK_MODEL == "u2netp"
    docs = Path(__file__).resolve().parents[2] / "docs"
    assert f"(default `{DEFAULT_MASK_MODEL}`" in (docs / "masks.md").read_text(encoding="utf-8")
    assert f"`{DEFAULT_MASK_MODEL}` (default mask model)" in (docs / "offline.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_masks_command_runs_the_torch_backend_in_batches_and_names_it(tmp_path, monkeypatch, u2netp_file):
    import json

    monkeypatch.setenv("U2NET_HOME", str(u2netp_file.parent))
    root = make_bench(tmp_path / "bench", train_classes=1, val_classes=1, test_classes=1, per_class=1)
    out = tmp_path / "masks"
    args = ["masks", "--dataset", "bench", "--root", str(root), "--out", str(out), "--backend", "torch",
            "--batch-size", "2", "--device", "cpu"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "3 images (u2netp, torch on cpu): 3 written, 0 already done, 0 failed" in result.stdout
    inference = json.loads((out / "manifest.json").read_text())["inference"]
    assert (inference["backend"], inference["batch"], inference["provider"]) == ("torch", 2, "cpu")


@pytest.mark.slow
def test_the_api_makes_masks_with_the_torch_backend_in_batches(tmp_path, monkeypatch, u2netp_file):
    import bgbias
    from bgbias.errors import OptionError

    monkeypatch.setenv("U2NET_HOME", str(u2netp_file.parent))
    root = make_bench(tmp_path / "bench", train_classes=1, val_classes=1, test_classes=1, per_class=1)
    run = bgbias.make_masks("bench", root, out=tmp_path / "masks", backend="torch", device="cpu",
                            batch_size=2)
    assert (run.written, run.failed) == (3, 0)
    assert "(u2netp, torch on cpu)" in run.describe()
    with pytest.raises(OptionError, match="tpu"):
        bgbias.make_masks("bench", root, out=tmp_path / "other", backend="tpu")


def test_ground_truth_masks_refuse_the_options_of_a_network_run(tmp_path):
    root = make_bench(tmp_path / "bench", train_classes=1, val_classes=1, test_classes=1, per_class=1)
    args = ["masks", "--dataset", "bench", "--root", str(root), "--model", "ground-truth", "--out",
            str(tmp_path / "gt"), "--backend", "torch", "--batch-size", "2", "--shard", "1/2"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "--backend, --batch-size, --shard and --model ground-truth together" in text
    assert "leave them out" in text and not (tmp_path / "gt").exists()
