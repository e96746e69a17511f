"""`bgbias train` and `bgbias methods` from the command line."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from bgbias.cli import main

TINY = ["--backbone=tiny_cnn"] + [
    f"--set={s}" for s in ("model.pretrained=false", "model.embedding_dim=16", "data.batch_size=8",
                           "data.m_per_class=2", "data.crop=32", "data.workers=0")
]


@pytest.mark.slow
def test_train_then_resume_a_finished_run(tiny_bench, tmp_path):
    run = tmp_path / "run"
    args = ["train", "--method", "contrastive", "--root", str(tiny_bench / "bench"), "--epochs", "1",
            "--run-dir", str(run), "--no-progress", *TINY]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "best epoch 1" in result.output and str(run) in result.output
    again = CliRunner().invoke(main, ["train", "--resume", str(run), "--no-progress"])
    assert again.exit_code == 0, again.output
    assert "finished" in again.output


def test_resume_takes_no_other_settings(tmp_path):
    result = CliRunner().invoke(main, ["train", "--resume", str(tmp_path), "--epochs", "3"])
    assert result.exit_code == 2
    assert "--resume continues a run" in result.output and "epochs" in result.output


def test_unknown_method_is_a_clear_error():
    result = CliRunner().invoke(main, ["train", "--method", "nope"])
    assert result.exit_code == 2
    assert "unknown method 'nope'" in result.output and "multi_similarity" in result.output


def test_bgaugment_without_masks_names_the_masks_command(tiny_bench, tmp_path):
    args = ["train", "--root", str(tiny_bench / "bench"), "--bgaugment", "--masks", str(tmp_path / "none"),
            "--backgrounds", str(tiny_bench / "backgrounds"), "--run-dir", str(tmp_path / "run"), *TINY]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert "bgbias masks --dataset bench" in result.output
    assert not (tmp_path / "run").exists()


def test_a_bad_loss_option_stops_before_the_run_folder(tiny_bench, tmp_path):
    args = ["train", "--method", "cosface", "--root", str(tiny_bench / "bench"), "--run-dir",
            str(tmp_path / "run"), *TINY, "--set", "loss.margin=abc"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert 'error: --set: setting loss.margin = "abc" is invalid' in result.output
    assert not (tmp_path / "run").exists()


def test_methods_lists_methods_and_backbones():
    result = CliRunner().invoke(main, ["methods"])
    assert result.exit_code == 0
    assert "multi_similarity" in result.output and "proxy_anchor" in result.output
    assert "bninception" in result.output and "mobilenet_v2" in result.output
    assert "tiny_cnn" in result.output
