"""``bgbias masks`` end to end on a tiny bench, with the real u2netp or the fake session: files, quality
report, what the terminal says, exit status."""

from __future__ import annotations

from click.testing import CliRunner

from bgbias.cli import main
from bgbias.saliency import pipeline
from tests.replicas import make_bench, write_picture
from tests.saliency.fakes import FakeSession


def _run(root, out, monkeypatch, u2netp_file):
    monkeypatch.setenv("U2NET_HOME", str(u2netp_file.parent))
    args = ["masks", "--dataset", "bench", "--root", str(root), "--model", "u2netp", "--out", str(out)]
    return CliRunner().invoke(main, args)


def test_masks_command_writes_every_mask_and_prints_quality(tmp_path, monkeypatch, u2netp_file):
    root = make_bench(tmp_path / "bench", train_classes=1, val_classes=1, test_classes=1, per_class=2)
    result = _run(root, tmp_path / "masks", monkeypatch, u2netp_file)
    assert result.exit_code == 0, result.output
    assert "6 written, 0 already done, 0 failed" in result.output
    assert "IoU" in result.output and "overlap" in result.output
    assert len(list((tmp_path / "masks" / "images").rglob("*.png"))) == 6
    again = _run(root, tmp_path / "masks", monkeypatch, u2netp_file)
    assert "0 written, 6 already done" in again.output


def test_masks_command_records_a_bad_image_and_exits_non_zero(tmp_path, monkeypatch, u2netp_file):
    root = make_bench(tmp_path / "bench", train_classes=1, val_classes=1, test_classes=1, per_class=2)
    broken = sorted((root / "images").rglob("*.jpg"))[0]
    broken.write_bytes(b"not a jpeg")
    result = _run(root, tmp_path / "masks", monkeypatch, u2netp_file)
    assert result.exit_code == 1
    assert "5 written, 0 already done, 1 failed" in result.output
    assert "1 image(s) failed" in result.output

def _run_fake(root, out, monkeypatch):
    monkeypatch.setattr(pipeline, "open_session", lambda *_args, **_options: FakeSession())
    args = ["masks", "--dataset", "bench", "--root", str(root), "--out", str(out)]
    return CliRunner().invoke(main, args)


def test_the_summary_says_which_masks_were_re_made(tmp_path, monkeypatch):
    root = make_bench(tmp_path / "bench", train_classes=1, val_classes=1, test_classes=1, per_class=2)
    assert _run_fake(root, tmp_path / "masks", monkeypatch).exit_code == 0
    write_picture(sorted((root / "images").rglob("*.jpg"))[0], 99)
    result = _run_fake(root, tmp_path / "masks", monkeypatch)
    assert result.exit_code == 0, result.output
    assert "1 written, 5 already done, 0 failed" in result.output
    assert "1 of the written masks were re-made: their image or ground truth had changed" in result.output

