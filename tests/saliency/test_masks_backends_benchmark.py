"""benchmarks/masks_backends.py: its parity measures and configuration names on tiny arrays, its step timing
on the fake session, and (slow) a whole run on a bench replica with the real u2netp; benchmarks/masks_speed.py
still runs on the sessions API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bgbias.data.items import mask_path
from tests.saliency.fakes import FakeSession, fake_info
from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


def _script():
    return load_script("benchmarks/masks_backends.py")


def test_the_largest_difference_is_of_the_8_bit_values_without_wrapping_around():
    script = _script()
    reference = np.array([[0, 255], [10, 128]], dtype=np.uint8)
    mask = np.array([[3, 250], [10, 128]], dtype=np.uint8)
    assert script.max_difference(mask, reference) == 5
    assert script.max_difference(reference, np.full((2, 2), 255, dtype=np.uint8)) == 255
    with pytest.raises(ValueError, match="shapes differ"):
        script.max_difference(mask, reference[:1])


def test_foreground_iou_thresholds_at_128_and_counts_two_empty_masks_as_equal():
    script = _script()
    reference = np.array([[200, 200, 0, 0]], dtype=np.uint8)
    assert script.foreground_iou(np.array([[128, 0, 0, 0]], dtype=np.uint8), reference) == 0.5
    assert script.foreground_iou(np.array([[127, 0, 0, 0]], dtype=np.uint8), reference) == 0.0
    assert script.foreground_iou(np.zeros((1, 4), np.uint8), np.full((1, 4), 127, np.uint8)) == 1.0


def test_parity_gives_the_mean_and_the_worst_over_the_images(tmp_path, bench_items):
    script = _script()
    items = bench_items[:2]
    for folder, values in (("ours", (0, 200)), ("reference", (3, 0))):
        for item, value in zip(items, values, strict=True):
            path = mask_path(item, tmp_path / folder)
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.new("L", (4, 4), value).save(path)
    close = script.parity(items, tmp_path / "ours", tmp_path / "reference")
    assert close == script.Parity(mean_max_difference=101.5, worst_max_difference=200, mean_iou=0.5,
                                  worst_iou=0.0)


def test_configuration_names_say_backend_batch_and_precision_and_the_anchor_follows_the_device():
    script = _script()
    cpu = script.parse_configs(script.CPU_CONFIGS, "cpu")
    assert [config.name for config in cpu] == ["onnxruntime", "torch-b1"]
    assert script.anchor_of(cpu, "cpu").backend == "onnxruntime"
    cuda = script.parse_configs(script.CUDA_CONFIGS, "cuda")
    assert cuda[-1] == script.Config("torch", 32, "fp16")
    assert script.anchor_of(cuda, "cuda") == script.Config("torch", 1, "fp32")
    assert script.parse_configs("torch-b8-fp32", "cpu")[0].name == "torch-b8"
    assert script.Config("torch", 32, "bf16").inference("cuda").amp == "bf16"


@pytest.mark.parametrize(("text", "device", "message"), [
    ("torch-b0", "cpu", "unknown configuration"),
    ("tensorrt", "cpu", "unknown configuration"),
    ("onnxruntime-b8", "cpu", "one image at a time"),
    ("torch-b32-bf16", "cpu", "CUDA only"),
    ("torch-b1,torch-b1-fp32", "cpu", "named twice"),
])
def test_a_configuration_that_cannot_run_is_refused_with_the_reason(text, device, message):
    with pytest.raises(ValueError, match=message):
        _script().parse_configs(text, device)


def test_step_times_make_every_mask_and_time_each_step(tmp_path, bench_items):
    session = FakeSession(fake_info(batch=4))
    times = _script().step_times(session, bench_items, tmp_path / "masks")
    assert session.batches == [4, 4, 4]
    assert all(mask_path(item, tmp_path / "masks").is_file() for item in bench_items)
    assert min(times.decode, times.shrink, times.network, times.finish) > 0
    assert times.total == pytest.approx(times.decode + times.shrink + times.network + times.finish)


def test_random_weights_open_seeded_torch_sessions_without_the_model_file(tmp_path, monkeypatch):
    import torch

    script = _script()
    monkeypatch.setenv("U2NET_HOME", str(tmp_path / "no-models-here"))
    configs = script.parse_configs("torch-b1,torch-b2", "cpu")
    sessions = script.random_weight_sessions("u2netp", configs, "cpu", tmp_path / "random")
    assert [(session.info.backend, session.info.batch) for session in sessions.values()] == [("torch", 1),
                                                                                             ("torch", 2)]
    first, second = (session._network.state_dict() for session in sessions.values())
    assert all(torch.equal(first[name], second[name]) for name in first)  # seed 0 for every configuration
    assert not (tmp_path / "no-models-here").exists()


@pytest.mark.slow
def test_random_weights_refuse_onnxruntime_which_runs_the_file(tmp_path):
    command = [sys.executable, str(ROOT / "benchmarks" / "masks_backends.py"), "--random-weights",
               "--configs", "onnxruntime,torch-b1", "--images", str(tmp_path)]
    done = subprocess.run(command, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "torch backend only" in done.stderr


def _environment(u2netp_file: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "U2NET_HOME": str(u2netp_file.parent),
            "OMP_NUM_THREADS": "1"}


@pytest.mark.slow
def test_a_run_on_the_bench_writes_a_record_with_every_table(tmp_path, bench_items, u2netp_file):
    bench = bench_items[0].image.parents[len(bench_items[0].relpath.parts) - 1]
    record = tmp_path / "record.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "masks_backends.py"), "--bench", str(bench),
               "-n", "2", "--repeats", "1", "--json", str(record), "--note", "a test"]
    subprocess.run(command, env=_environment(u2netp_file), capture_output=True, text=True, timeout=600,
                   check=True)
    written = json.loads(record.read_text(encoding="utf-8"))
    assert written["source"]["note"].endswith("; a test")
    assert [row[1] for row in written["tables"]["throughput"]["rows"]] == ["onnxruntime (anchor)", "torch-b1"]
    assert [row[1] for row in written["tables"]["steps"]["rows"]] == ["onnxruntime", "torch-b1"]
    parity = {row[1]: row for row in written["tables"]["parity"]["rows"]}
    assert parity["onnxruntime"][2:6] == ["0.00", "0", "1.0000", "1.0000"]
    assert parity["onnxruntime"][6] == parity[_script().REFERENCE][6] != "—"  # scored against the truth
    assert parity["torch-b1"][7] != "—"


@pytest.mark.slow
def test_the_rembg_comparison_still_runs(u2netp_file):
    pytest.importorskip("skimage")
    pytest.importorskip("rembg")
    command = [sys.executable, str(ROOT / "benchmarks" / "masks_speed.py"), "-n", "1", "--repeats", "1"]
    done = subprocess.run(command, env=_environment(u2netp_file), capture_output=True, text=True,
                          timeout=600, check=True)
    assert "bgbias pipeline" in done.stdout and "identical to rembg.remove: 1/1" in done.stdout
