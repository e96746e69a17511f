"""The backend setting: what the manifest records of it, the folder rule (no mixing; ``auto`` goes on with the
folder's backend, also of a manifest from before backends), which backend ``auto`` picks, and the option
combinations that are refused with their fix (on the command line, through the API and ``U2NetMasks``)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import pytest
import torch
from click.testing import CliRunner

import bgbias
from bgbias.cli import main
from bgbias.data.registry import open_dataset
from bgbias.errors import OptionError
from bgbias.saliency import pipeline
from bgbias.saliency.pipeline import make_masks, write_masks
from bgbias.saliency.records import MANIFEST_NAME
from bgbias.saliency.sessions import Inference, chosen_backend, open_session
from tests.replicas import make_bench
from tests.saliency.fakes import FakeSession, fake_info


@pytest.fixture
def three_items(tmp_path):
    root = make_bench(tmp_path / "bench", train_classes=1, val_classes=1, test_classes=1, per_class=1)
    return open_dataset("bench", root).items()


@pytest.fixture
def onnxruntime_folder(three_items, tmp_path, u2netp_session, u2netp_file, monkeypatch):
    """Masks of the first two images made by onnxruntime (the third is left to do); U2NET_HOME points at
    the u2netp file."""
    monkeypatch.setenv("U2NET_HOME", str(u2netp_file.parent))
    out = tmp_path / "masks"
    write_masks(three_items[:2], out, u2netp_session, progress=False)
    return out


def manifest(out) -> dict:
    return json.loads((out / MANIFEST_NAME).read_text())


def opened_sessions(monkeypatch) -> list:
    """Every session the pipeline opens from now on."""
    sessions: list = []

    def spy(*args, **kwargs):
        sessions.append(open_session(*args, **kwargs))
        return sessions[-1]

    monkeypatch.setattr(pipeline, "open_session", spy)
    return sessions


@pytest.mark.slow
def test_the_manifest_records_how_the_network_ran_and_the_versions_of_what_ran_it(three_items, tmp_path,
                                                                                  u2netp_torch,
                                                                                  u2netp_session):
    import onnxruntime

    write_masks(three_items[:1], tmp_path / "torch", u2netp_torch, progress=False)
    torch_run = manifest(tmp_path / "torch")
    info = u2netp_torch.info
    assert torch_run["inference"] == {"backend": "torch", "provider": "cpu", "precision": "fp32", "batch": 1,
                                      "streams": info.streams, "threads": info.threads}
    assert torch_run["producer"] == {"bgbias": bgbias.__version__, "torch": torch.__version__}
    assert (torch_run["settings"]["backend"], torch_run["settings"]["precision"]) == ("torch", "fp32")

    write_masks(three_items[:1], tmp_path / "ort", u2netp_session, progress=False)
    ort_run = manifest(tmp_path / "ort")
    assert ort_run["inference"] == {"backend": "onnxruntime", "provider": "CPUExecutionProvider",
                                    "precision": "fp32", "batch": 1, "streams": 1,
                                    "threads": u2netp_session.info.threads}
    assert ort_run["producer"] == {"bgbias": bgbias.__version__, "rembg": bgbias_version("rembg"),
                                   "onnxruntime": onnxruntime.__version__}


def bgbias_version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


@pytest.mark.slow
def test_a_folder_of_onnxruntime_masks_refuses_torch_ones_with_the_fix(three_items, onnxruntime_folder):
    before = (onnxruntime_folder / MANIFEST_NAME).read_bytes()
    with pytest.raises(OptionError) as caught:
        make_masks(three_items, onnxruntime_folder, model="u2netp", progress=False,
                   inference=Inference(backend="torch", device="cpu"))
    assert caught.value.path == str(onnxruntime_folder / MANIFEST_NAME)
    assert "backend: 'onnxruntime' there, 'torch' now" in caught.value.problem
    assert "--backend onnxruntime" in caught.value.fix and "--backend auto" in caught.value.fix
    assert (onnxruntime_folder / MANIFEST_NAME).read_bytes() == before


@pytest.mark.slow
def test_auto_goes_on_with_the_folders_onnxruntime(three_items, onnxruntime_folder, monkeypatch):
    sessions = opened_sessions(monkeypatch)
    result = make_masks(three_items, onnxruntime_folder, model="u2netp", progress=False,
                        inference=Inference(device="cpu"))
    assert [session.info.backend for session in sessions] == ["onnxruntime"]
    assert (result.skipped, result.written) == (2, 1)
    assert manifest(onnxruntime_folder)["inference"]["backend"] == "onnxruntime"


@pytest.mark.parametrize(("model", "on_cuda", "on_cpu"), [
    ("u2net", "torch", "onnxruntime"), ("u2netp", "torch", "onnxruntime"),
    ("u2net_human_seg", "torch", "onnxruntime"),
    ("silueta", "onnxruntime", "onnxruntime"), ("isnet-general-use", "onnxruntime", "onnxruntime"),
])
def test_auto_picks_torch_on_cuda_where_it_has_the_network_and_onnxruntime_on_the_cpu(model, on_cuda, on_cpu):
    """By measurement: on 2 CPU cores onnxruntime made masks 1.1× as fast as the torch network (docs/
    benchmarks.md, Mask backends); on a GPU torch takes whole batches."""
    assert chosen_backend(model, Inference(device="cuda")) == on_cuda
    assert chosen_backend(model, Inference(device="cpu")) == on_cpu


def test_auto_takes_torch_on_the_cpu_where_onnxruntime_is_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    assert chosen_backend("u2netp", Inference(device="cpu")) == "torch"
    assert chosen_backend("silueta", Inference(device="cpu")) == "onnxruntime"  # torch has no network for it


def test_auto_takes_torch_for_mixed_precision_the_only_backend_that_has_it():
    assert chosen_backend("u2netp", Inference(device="cpu", amp="bf16")) == "torch"  # then refused on the CPU
    assert chosen_backend("u2netp", Inference(device="cpu", amp="off")) == "onnxruntime"


def masks_command(tmp_path, *options: str):
    root = make_bench(tmp_path / "bench", train_classes=1, val_classes=1, test_classes=1, per_class=1)
    args = ["masks", "--dataset", "bench", "--root", str(root), "--out", str(tmp_path / "masks"), *options]
    return CliRunner().invoke(main, args)


@pytest.mark.usefixtures("no_models")  # refused for the options alone, before any model file is looked for
@pytest.mark.parametrize(("options", "problem", "fix"), [
    (("--backend", "torch", "--model", "silueta"), "the torch backend has no network for silueta",
     "use --backend onnxruntime (or auto) for silueta"),
    (("--backend", "torch", "--device", "cpu", "--amp", "fp16"), "--amp fp16 runs U²-Net on CUDA only",
     "leave --amp at auto (or off) on the CPU"),
    (("--device", "cpu", "--amp", "bf16"), "--amp bf16 runs U²-Net on CUDA only",
     "leave --amp at auto (or off) on the CPU"),
    (("--backend", "onnxruntime", "--batch-size", "4"), "takes one image per call on onnxruntime, not 4",
     "use --backend torch to batch"),
    (("--backend", "onnxruntime", "--amp", "bf16"), "without --amp bf16",
     "use the torch backend for bf16 or fp16, or leave --amp at auto"),
])
def test_impossible_combinations_are_refused_with_the_fix(tmp_path, options, problem, fix):
    result = masks_command(tmp_path, *options)
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert problem in text and fix in text
    assert "Traceback" not in result.output and not (tmp_path / "masks").exists()


@pytest.mark.parametrize(("options", "choices"), [
    (("--backend", "tpu"), "auto, torch, onnxruntime"),
    (("--amp", "fp8"), "auto, off, bf16, fp16"),
    (("--batch-size", "0"), "x>=1"),
])
def test_bad_values_are_refused_with_the_choices(tmp_path, options, choices):
    result = masks_command(tmp_path, *options)
    assert result.exit_code == 2, result.output
    assert options[0] in result.output and choices in " ".join(result.output.split()).replace("'", "")


def test_the_refusal_names_the_options_that_go_on_with_the_folder(bench_items, tmp_path):
    """Each differing setting an option sets is named with the folder's value (``--amp`` for a precision)."""
    out = tmp_path / "m"
    write_masks(bench_items, out, FakeSession(replace(fake_info(), precision="bf16")), progress=False)
    torch_fp32 = FakeSession(fake_info(backend="torch"))
    with pytest.raises(OptionError) as caught:
        write_masks(bench_items, out, torch_fp32, empty_below=0.9, progress=False)
    assert "precision: 'bf16' there, 'fp32' now" in caught.value.problem
    assert caught.value.fix.startswith("pass --backend onnxruntime --amp bf16 --empty-below 0.5 to go on")
    other_file = FakeSession(replace(fake_info(), precision="bf16", md5="1" * 32))
    with pytest.raises(OptionError) as caught:
        write_masks(bench_items, out, other_file, progress=False)
    assert caught.value.fix.startswith("use the model file its masks were made with")
