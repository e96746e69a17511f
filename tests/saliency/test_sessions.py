"""Opening a session: model names, providers, and a clear error (with the fix) when the model is missing."""

from __future__ import annotations

import sys

import pytest

from bgbias.errors import AssetError, OptionError
from bgbias.hardware import usable_cores
from bgbias.saliency.pipeline import make_masks
from bgbias.saliency.sessions import (
    CPU,
    CUDA,
    MODELS,
    PREDICT_MODELS,
    U2NET_FAMILY,
    Inference,
    choose_providers,
    default_streams,
    default_threads,
    open_session,
)


def test_cpu_is_cpu_whatever_is_offered():
    assert choose_providers("cpu", [CUDA, CPU]) == [CPU]


def test_auto_takes_cuda_only_when_onnxruntime_offers_it():
    assert choose_providers("auto", [CUDA, CPU]) == [CUDA, CPU]
    assert choose_providers("auto", ["AzureExecutionProvider", CPU]) == [CPU]


def test_cuda_without_a_cuda_build_says_how_to_get_one():
    with pytest.raises(OptionError) as caught:
        choose_providers("cuda", ["AzureExecutionProvider", CPU])
    assert "onnxruntime-gpu" in caught.value.fix
    assert "--device cpu" in caught.value.fix


def test_unknown_device_and_model_are_refused_with_the_choices():
    with pytest.raises(OptionError, match="unknown device"):
        choose_providers("tpu", [CPU])
    with pytest.raises(OptionError) as caught:
        open_session("u2net-large")
    assert "u2netp" in caught.value.fix


@pytest.mark.slow
def test_every_listed_model_is_a_rembg_session():
    from rembg.sessions import sessions_names

    assert set(MODELS) <= set(sessions_names)
    assert "u2net" in U2NET_FAMILY and not set(U2NET_FAMILY) & set(PREDICT_MODELS)


def test_streams_share_the_cores():
    assert default_streams(CUDA) == 1
    assert 1 <= default_streams(CPU) <= min(usable_cores(), 4)
    assert default_threads(1) == usable_cores()
    assert default_threads(usable_cores() + 1) == 1


@pytest.mark.usefixtures("no_models")
def test_missing_model_raises_asset_error_naming_the_fix():
    with pytest.raises(AssetError) as caught:
        open_session("u2netp", Inference(backend="onnxruntime", device="cpu"))
    assert "u2netp.onnx" in caught.value.problem
    assert "bgbias assets fetch u2netp" in caught.value.fix
    assert "U2NET_HOME" in caught.value.fix


@pytest.mark.usefixtures("no_models")
def test_make_masks_fails_before_touching_any_image(bench_items, tmp_path):
    out = tmp_path / "masks"
    with pytest.raises(AssetError):
        make_masks(bench_items, out, model="u2net", inference=Inference(device="cpu"), progress=False)
    assert not out.exists()


def test_a_damaged_model_file_is_an_asset_error(tmp_path, monkeypatch):
    (tmp_path / "u2netp.onnx").write_bytes(b"not an onnx graph")
    monkeypatch.setenv("U2NET_HOME", str(tmp_path))
    with pytest.raises(AssetError) as caught:
        open_session("u2netp", Inference(backend="onnxruntime", device="cpu"))
    assert caught.value.path == str(tmp_path / "u2netp.onnx")
    assert "--force" in caught.value.fix


def test_zero_streams_threads_or_batch_are_refused():
    with pytest.raises(OptionError, match="streams"):
        Inference(streams=0)
    with pytest.raises(OptionError, match="threads"):
        Inference(threads=0)
    with pytest.raises(OptionError, match="batch-size"):
        Inference(batch=0)


def test_other_models_run_whole_through_rembg_predict():
    from PIL import Image

    from bgbias.saliency.sessions import PredictSession
    from tests.saliency.fakes import fake_info

    class RembgLike:
        def predict(self, image):
            return [Image.new("LA", (image.width // 2, image.height // 2), (200, 255))]

    session = PredictSession(RembgLike(), fake_info("isnet-general-use"))
    image = Image.new("RGB", (40, 30))
    soft = session.finish(session.infer([session.prepare(image)])[0], image.size)
    assert (soft.image.mode, soft.image.size, soft.raw_min, soft.raw_max) == ("L", (40, 30), None, None)


@pytest.mark.slow
def test_importing_rembg_keeps_the_torch_thread_count_a_process_set():
    """pymatting's numba functions, loaded with rembg, reset OpenMP's (torch's) thread count; a study that
    made masks and then trained in one process computed with another count than it set (other digits)."""
    import subprocess
    import sys

    # Once torch has run anything (here: asked its thread count), OpenMP is started and the reset shows.
    code = ("import torch; torch.set_num_threads(1); assert torch.get_num_threads() == 1\n"
            "from bgbias.saliency.sessions import keeping_torch_threads\n"
            "with keeping_torch_threads():\n    import rembg\n"
            "print(torch.get_num_threads())\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "1"


def test_the_u2net_family_runs_in_bgbias_own_onnxruntime_session(u2netp_session):
    """rembg's public API gives only its min-max-scaled mask; the raw output the pipeline records needs the
    network itself, which bgbias opens as rembg would (the masks stay rembg's: test_rembg_identity.py)."""
    import onnxruntime

    assert isinstance(u2netp_session._session, onnxruntime.InferenceSession)


@pytest.mark.parametrize(("missing", "backend", "fixes"), [
    ("onnxruntime", "onnxruntime", ["pip install onnxruntime"]),
    ("onnx", "torch", ["pip install onnx", "backend=onnxruntime"]),
])
def test_a_backend_without_its_package_stops_with_the_fix(u2netp_file, monkeypatch, missing, backend, fixes):
    """Each backend needs one package the other does not (the torch backend masks without onnxruntime:
    tests/saliency/test_torch_backend.py)."""
    monkeypatch.setenv("U2NET_HOME", str(u2netp_file.parent))
    monkeypatch.setitem(sys.modules, missing, None)  # makes the import raise ImportError
    with pytest.raises(AssetError) as caught:
        open_session("u2netp", Inference(backend=backend, device="cpu"))
    assert f"{missing} is not installed" in caught.value.problem
    assert all(fix in caught.value.fix for fix in fixes)
