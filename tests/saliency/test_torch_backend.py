"""The torch backend with the real u2netp on the CPU: its masks against onnxruntime's (rembg's), batches
against single images, resume and shards, and masks without onnxruntime installed."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from PIL import Image

from bgbias.data.images import load_image
from bgbias.data.items import mask_path
from bgbias.data.registry import open_dataset
from bgbias.errors import AssetError
from bgbias.saliency.pipeline import make_masks, write_masks
from bgbias.saliency.sessions import Inference, open_session
from bgbias.saliency.torch_session import Stretched
from bgbias.saliency.u2net import SoftMask
from tests.replicas import make_bench
from tests.saliency.test_pipeline import Stop, snapshot, stop_after


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> list[Image.Image]:
    """Three images of a bench replica (tiny, with a plain object) and two of scikit-image's photos
    (451×300 and 600×400: real subjects, larger than the network's input)."""
    import skimage.data

    root = make_bench(tmp_path_factory.mktemp("bench"), train_classes=1, val_classes=1, test_classes=1,
                      per_class=1)
    bench = [load_image(item.image) for item in open_dataset("bench", root).items()]
    return bench + [Image.fromarray(getattr(skimage.data, name)()) for name in ("chelsea", "coffee")]


@pytest.fixture(scope="module")
def torch_outputs(images, u2netp_torch) -> list[Stretched]:
    """The torch network's output for each image, one image per call."""
    return [u2netp_torch.infer([u2netp_torch.prepare(image)])[0] for image in images]


@pytest.fixture(scope="module")
def u2netp_torch_batch3(u2netp_file):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("U2NET_HOME", str(u2netp_file.parent))
        return open_session("u2netp", Inference(backend="torch", device="cpu", batch=3))


@pytest.fixture(scope="module")
def six_items(tmp_path_factory):
    root = make_bench(tmp_path_factory.mktemp("bench"), train_classes=1, val_classes=1, test_classes=1,
                      per_class=2)
    return open_dataset("bench", root).items()


@pytest.fixture(scope="module")
def whole_run(six_items, tmp_path_factory, u2netp_torch) -> dict[str, bytes]:
    """Every file of one uninterrupted, unsharded torch run on the six images."""
    out = tmp_path_factory.mktemp("whole")
    write_masks(six_items, out, u2netp_torch, progress=False)
    return snapshot(out)


def thresholded_iou(ours: np.ndarray, theirs: np.ndarray) -> float:
    """IoU of the masks cut at 128, as the quality report cuts them; two empty masks agree fully."""
    a, b = ours >= 128, theirs >= 128
    union = np.logical_or(a, b).sum()
    return 1.0 if union == 0 else float(np.logical_and(a, b).sum() / union)


def pixels(soft: SoftMask) -> np.ndarray:
    return np.asarray(soft.image, dtype=np.int16)


@pytest.mark.slow
def test_torch_masks_match_onnxruntime_within_two_gray_levels(images, torch_outputs, u2netp_torch,
                                                               u2netp_session):
    for index, (image, output) in enumerate(zip(images, torch_outputs, strict=True)):
        ours = u2netp_torch.finish(output, image.size)
        theirs = u2netp_session.finish(u2netp_session.infer([u2netp_session.prepare(image)])[0], image.size)
        assert ours.image.size == theirs.image.size == image.size
        difference = np.abs(pixels(ours) - pixels(theirs)).max()
        assert difference <= 2, f"image {index}: max |Δ| {difference}"
        assert thresholded_iou(pixels(ours), pixels(theirs)) >= 0.99, f"image {index}"
        assert ours.raw_min == pytest.approx(theirs.raw_min, abs=1e-4)
        assert ours.raw_max == pytest.approx(theirs.raw_max, abs=1e-4)


@pytest.mark.slow
def test_a_batch_of_three_equals_three_single_calls(images, torch_outputs, u2netp_torch_batch3):
    chosen = (0, 3, 4)  # a bench image and both photos
    batch = u2netp_torch_batch3.infer([u2netp_torch_batch3.prepare(images[i]) for i in chosen])
    assert len(batch) == 3
    for index, together in zip(chosen, batch, strict=True):
        alone = torch_outputs[index]
        difference = np.abs(together.pixels.astype(np.int16) - alone.pixels.astype(np.int16)).max()
        assert difference <= 1, f"image {index}: max |Δ| {difference}"
        assert together.low == pytest.approx(alone.low, abs=1e-5)
        assert together.high == pytest.approx(alone.high, abs=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("thread", [False, True], ids=["cpu", "session-thread"])
def test_a_short_batch_is_padded_and_gives_the_unpadded_outputs(images, torch_outputs, u2netp_torch_batch3,
                                                                  thread, monkeypatch):
    """A short batch reaches the network padded to the session's batch size, so the CPU's packed weights
    (and on CUDA cuDNN's plans) see one shape. ``session-thread`` is the CUDA path (one session thread) run on
    the CPU. A full batch takes the same code with no padding, and
    test_a_batch_of_three_equals_three_single_calls checks a full batch's outputs."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    session = u2netp_torch_batch3
    if thread:
        monkeypatch.setattr(session, "_cuda_thread", ThreadPoolExecutor(1, "u2net-test"))
    seen: list[tuple[int, int]] = []
    hook = session._network.register_forward_hook(
        lambda _module, inputs, _output: seen.append((threading.get_ident(), inputs[0].shape[0])))
    try:
        short = session.infer([session.prepare(images[3])])
    finally:
        hook.remove()
        if thread:
            session._cuda_thread.shutdown()
    assert len(short) == 1 and [size for _, size in seen] == [3]
    assert (seen[0][0] != threading.get_ident()) == thread
    alone = torch_outputs[3]
    assert np.abs(short[0].pixels.astype(np.int16) - alone.pixels.astype(np.int16)).max() <= 1
    assert short[0].high == pytest.approx(alone.high, abs=1e-5)


@pytest.mark.slow
def test_the_cpu_session_packs_its_convolutions_for_its_batch_size(u2netp_torch_batch3):
    from bgbias.saliency.packed_convolutions import PackedConvRelu, can_pack
    from bgbias.saliency.u2net_network import ConvRelu

    if not can_pack():
        pytest.skip("this torch has no oneDNN CPU convolutions")
    layers = list(u2netp_torch_batch3._network.modules())
    assert not any(isinstance(layer, ConvRelu) for layer in layers)
    packed = [layer for layer in layers if isinstance(layer, PackedConvRelu)]
    assert packed and {layer.input_shape[0] for layer in packed} == {3}


@pytest.mark.slow
def test_two_shards_made_apart_equal_one_unsharded_run(six_items, whole_run, tmp_path, u2netp_torch):
    for index in range(2):
        result = write_masks(six_items, tmp_path, u2netp_torch, shard=(index, 2), progress=False)
        assert (result.written, result.failed) == (3, 0)
    sharded = snapshot(tmp_path)
    masks = sorted(name for name in whole_run if name.endswith(".png"))
    assert len(masks) == 6 and masks == sorted(name for name in sharded if name.endswith(".png"))
    assert all(whole_run[name] == sharded[name] for name in masks)


@pytest.mark.slow
def test_an_interrupted_torch_run_resumed_ends_byte_identical(six_items, whole_run, tmp_path, u2netp_torch):
    with pytest.raises(Stop):
        write_masks(six_items, tmp_path, u2netp_torch, progress=False, on_record=stop_after(2))
    result = write_masks(six_items, tmp_path, u2netp_torch, progress=False)
    assert (result.skipped, result.written) == (2, 4)
    assert snapshot(tmp_path) == whole_run


@pytest.mark.slow
def test_torch_masks_need_no_onnxruntime(six_items, tmp_path, u2netp_file, monkeypatch):
    monkeypatch.setenv("U2NET_HOME", str(u2netp_file.parent))
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # makes `import onnxruntime` raise ImportError
    cpu = Inference(backend="torch", device="cpu")
    result = make_masks(six_items[:2], tmp_path / "torch", model="u2netp", inference=cpu, progress=False)
    assert (result.written, result.failed) == (2, 0)
    assert all(mask_path(item, tmp_path / "torch").is_file() for item in six_items[:2])
    with pytest.raises(AssetError) as caught:
        make_masks(six_items[:2], tmp_path / "ort", model="u2netp", progress=False,
                   inference=Inference(backend="onnxruntime", device="cpu"))
    assert "onnxruntime is not installed" in caught.value.problem
    assert "pip install onnxruntime" in caught.value.fix


def test_the_cpu_session_packs_under_the_threads_of_its_calls(u2netp_file, monkeypatch):
    """oneDNN lays a weight out for the threads a call has; packed under others, every call rearranges it."""
    import torch

    import bgbias.saliency.torch_session as torch_session

    threads_when_packed = []

    def recording(network, batch):
        threads_when_packed.append(torch.get_num_threads())
        return network

    monkeypatch.setenv("U2NET_HOME", str(u2netp_file.parent))
    monkeypatch.setattr(torch_session, "can_pack", lambda: True)
    monkeypatch.setattr(torch_session, "pack_convolutions", recording)
    before = torch.get_num_threads()
    session = open_session("u2netp", Inference(backend="torch", device="cpu", streams=1, threads=before + 1))
    assert threads_when_packed == [session.info.threads] == [before + 1]
    assert torch.get_num_threads() == before
