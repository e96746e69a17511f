"""The torch backend on a CUDA device (skipped without one): float32 masks as the CPU's (TF32 off), bf16 and
fp16 masks against float32 ones (not within the bar: expected to fail until they are), a batch of eight in one
network call through the pipeline, one network thread across runs, and the study's masks step on a GPU."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from bgbias.data.images import load_image
from bgbias.saliency.pipeline import write_masks
from bgbias.saliency.sessions import Inference, open_session
from tests.saliency.test_torch_backend import thresholded_iou

pytestmark = pytest.mark.cuda

BATCH = 8


@pytest.fixture(scope="module")
def cuda_sessions(u2netp_file) -> dict:
    """u2netp on CUDA by precision (``--amp`` off, bf16, fp16), each taking the eight images at once."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("U2NET_HOME", str(u2netp_file.parent))
        return {amp: open_session("u2netp", Inference(backend="torch", device="cuda", amp=amp, batch=BATCH))
                for amp in ("off", "bf16", "fp16")}


@pytest.fixture
def eight(bench_items) -> list[Image.Image]:
    """Six bench images and two of scikit-image's photos."""
    import skimage.data

    photos = [Image.fromarray(getattr(skimage.data, name)()) for name in ("chelsea", "coffee")]
    return [load_image(item.image) for item in bench_items[:6]] + photos


def masks(session, images: list[Image.Image]) -> list[np.ndarray]:
    """Each image's 8-bit mask, as many images per network call as the session takes."""
    size = session.info.batch
    with session.running():
        outputs = [raw for start in range(0, len(images), size)
                   for raw in session.infer([session.prepare(image) for image in images[start:start + size]])]
    return [np.asarray(session.finish(raw, image.size).image, dtype=np.int16)
            for raw, image in zip(outputs, images, strict=True)]


def test_cuda_float32_masks_are_the_cpus_within_two_gray_levels(eight, cuda_sessions, u2netp_torch):
    images = eight
    assert cuda_sessions["off"].info.provider.startswith("cuda")
    for index, (gpu, cpu) in enumerate(zip(masks(cuda_sessions["off"], images), masks(u2netp_torch, images),
                                           strict=True)):
        assert np.abs(gpu - cpu).max() <= 2, f"image {index}: max |Δ| {np.abs(gpu - cpu).max()}"


@pytest.mark.xfail(strict=True, reason="measured on an H100 (2026-11-28): bf16 moved a bench view's mask by "
                   "up to 125 gray levels, fp16 by 14, so --amp auto keeps float32 (docs/benchmarks.md)")
@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_mixed_precision_masks_stay_close_to_float32(eight, cuda_sessions, amp):
    images = eight
    assert cuda_sessions[amp].info.precision == amp
    reference = masks(cuda_sessions["off"], images)
    mixed = masks(cuda_sessions[amp], images)
    ious = [thresholded_iou(ours, theirs) for ours, theirs in zip(mixed, reference, strict=True)]
    for index, (ours, theirs) in enumerate(zip(mixed, reference, strict=True)):
        assert np.abs(ours - theirs).max() <= 2, f"image {index}: max |Δ| {np.abs(ours - theirs).max()}"
    assert np.mean(ious) >= 0.999 and min(ious) >= 0.99, ious


def test_a_batch_of_eight_is_one_network_call(bench_items, cuda_sessions, tmp_path, monkeypatch):
    items = bench_items[:BATCH]
    session = cuda_sessions["off"]
    batches: list[int] = []
    forwards: list[int] = []
    infer = session.infer

    def counted(batch):
        batches.append(len(batch))
        return infer(batch)

    monkeypatch.setattr(session, "infer", counted)
    hook = session._network.register_forward_hook(lambda _module, inputs, _output: forwards.append(
        inputs[0].shape[0]))
    try:
        result = write_masks(items, tmp_path, session, progress=False)
    finally:
        hook.remove()
    assert (result.written, result.failed) == (len(items), 0)
    assert batches == forwards == [BATCH]


def test_the_study_masks_step_on_a_gpu_worker_runs_the_batched_torch_backend(
        tiny_bench, u2netp_file, tmp_path, monkeypatch):
    """What `bgbias study --devices auto` hands a GPU worker: the masks step on ``cuda:0``, no swap."""
    import json

    from bgbias.saliency.records import mask_maker
    from bgbias.study.spec import StudySpec
    from bgbias.study.steps import make_mask_shard

    monkeypatch.setenv("U2NET_HOME", str(u2netp_file.parent))
    masks = tmp_path / "masks"
    spec = StudySpec(dataset="bench", root=str(tiny_bench / "bench"), masks="u2netp", masks_dir=str(masks),
                     backgrounds=str(tiny_bench / "backgrounds"))
    make_mask_shard(spec, (0, 1), "auto", log=lambda _line: None)  # a worker of --devices auto
    maker = mask_maker(masks)
    assert (maker["backend"], maker["precision"]) == ("torch", "fp32")
    assert maker["provider"].startswith("cuda:0")
    inference = json.loads((masks / "manifest.json").read_text())["inference"]
    assert inference["batch"] > 1


def test_runs_share_one_network_thread_and_see_full_batches_only(bench_items, cuda_sessions, tmp_path):
    """cuDNN's plans are kept per thread: two runs of one session search them once (one thread), and a short
    last batch is padded so that no second shape is searched."""
    import threading

    session = cuda_sessions["off"]
    seen: list[tuple[int, int]] = []
    hook = session._network.register_forward_hook(
        lambda _module, inputs, _output: seen.append((threading.get_ident(), inputs[0].shape[0])))
    try:
        for run in range(2):
            result = write_masks(bench_items[:BATCH + 3], tmp_path / str(run), session, progress=False)
            assert result.written == BATCH + 3
    finally:
        hook.remove()
    assert len({thread for thread, _ in seen}) == 1
    assert [size for _, size in seen] == [BATCH] * 4
