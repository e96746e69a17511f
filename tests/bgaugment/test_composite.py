"""The compositing function: exact values, dtype and device kept, shape and dtype mismatches refused."""

from __future__ import annotations

import pytest
import torch

from bgbias.bgaugment.composite import composite


def _batch(value: float, shape=(2, 3, 4, 5), dtype=torch.float32) -> torch.Tensor:
    return torch.full(shape, value, dtype=dtype)


def test_mask_one_keeps_the_image_exactly():
    images = torch.rand(2, 3, 4, 5)
    backgrounds = torch.rand(2, 3, 4, 5)
    out = composite(images, torch.ones(2, 1, 4, 5), backgrounds)
    assert torch.equal(out, images)


def test_mask_zero_gives_the_background_exactly():
    images = torch.rand(2, 3, 4, 5)
    backgrounds = torch.rand(2, 3, 4, 5)
    out = composite(images, torch.zeros(2, 1, 4, 5), backgrounds)
    assert torch.equal(out, backgrounds)


def test_soft_mask_mixes_without_threshold():
    out = composite(_batch(4.0), _batch(0.25, (2, 1, 4, 5)), _batch(8.0))
    assert torch.equal(out, _batch(7.0))  # 0.25·4 + 0.75·8


def test_mask_applies_to_every_channel_and_per_pixel():
    images = torch.stack([torch.full((4, 5), float(c)) for c in (10, 20, 30)])[None]
    backgrounds = torch.zeros(1, 3, 4, 5)
    masks = torch.zeros(1, 1, 4, 5)
    masks[0, 0, 1, 2] = 1.0
    masks[0, 0, 3, 4] = 0.5
    out = composite(images, masks, backgrounds)
    assert out[0, :, 1, 2].tolist() == [10.0, 20.0, 30.0]
    assert out[0, :, 3, 4].tolist() == [5.0, 10.0, 15.0]
    assert out[0, :, 0, 0].tolist() == [0.0, 0.0, 0.0]


def test_each_sample_uses_its_own_mask():
    masks = torch.stack([torch.ones(1, 4, 5), torch.zeros(1, 4, 5)])
    out = composite(_batch(1.0), masks, _batch(2.0))
    assert torch.equal(out[0], torch.ones(3, 4, 5))
    assert torch.equal(out[1], torch.full((3, 4, 5), 2.0))


def test_pixel_space_equals_normalised_space():
    """The paper's code composited normalised tensors; with weights summing to one that is the same
    picture."""
    images, backgrounds = torch.rand(2, 3, 4, 5) * 255, torch.rand(2, 3, 4, 5) * 255
    masks = torch.rand(2, 1, 4, 5)
    mean = torch.tensor([104.0, 117.0, 128.0]).view(1, 3, 1, 1)
    normalised = composite(images - mean, masks, backgrounds - mean)
    assert torch.allclose(normalised + mean, composite(images, masks, backgrounds), atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_dtype_is_kept(dtype):
    out = composite(_batch(4.0, dtype=dtype), _batch(0.25, (2, 1, 4, 5), dtype), _batch(8.0, dtype=dtype))
    assert out.dtype == dtype
    assert torch.equal(out, _batch(7.0, dtype=dtype))


def test_device_is_kept():
    device = torch.device("meta")  # a device other than the CPU, present on every machine
    out = composite(
        torch.empty(2, 3, 4, 5, device=device),
        torch.empty(2, 1, 4, 5, device=device),
        torch.empty(2, 3, 4, 5, device=device),
    )
    assert out.device == device and out.shape == (2, 3, 4, 5)


@pytest.mark.cuda
def test_cuda_batch_stays_on_cuda():
    images = torch.rand(2, 3, 4, 5, device="cuda", dtype=torch.float16)
    masks = torch.ones(2, 1, 4, 5, device="cuda", dtype=torch.float16)
    out = composite(images, masks, torch.rand_like(images))
    assert out.is_cuda and out.dtype == torch.float16 and torch.equal(out, images)


@pytest.mark.parametrize(
    ("images", "masks", "backgrounds", "message"),
    [
        (torch.zeros(2, 3, 4, 5), torch.zeros(2, 3, 4, 5), torch.zeros(2, 3, 4, 5), "masks must be"),
        (torch.zeros(2, 3, 4, 5), torch.zeros(1, 1, 4, 5), torch.zeros(2, 3, 4, 5), "masks must be"),
        (torch.zeros(2, 3, 4, 5), torch.zeros(2, 1, 4, 6), torch.zeros(2, 3, 4, 5), "masks must be"),
        (torch.zeros(2, 3, 4, 5), torch.zeros(2, 1, 4, 5), torch.zeros(2, 3, 5, 5), "shape of images"),
        (torch.zeros(3, 4, 5), torch.zeros(1, 4, 5), torch.zeros(3, 4, 5), "4-D"),
    ],
)
def test_bad_shapes_raise(images, masks, backgrounds, message):
    with pytest.raises(ValueError, match=message):
        composite(images, masks, backgrounds)


def test_mixed_dtypes_raise():
    with pytest.raises(TypeError, match="float64"):
        composite(
            torch.zeros(1, 3, 2, 2), torch.zeros(1, 1, 2, 2, dtype=torch.float64), torch.zeros(1, 3, 2, 2)
        )


def test_integer_tensors_raise():
    """A uint8 blend would truncate the soft mask; the caller converts first."""
    with pytest.raises(TypeError, match="floating point"):
        composite(
            torch.zeros(1, 3, 2, 2, dtype=torch.uint8),
            torch.zeros(1, 1, 2, 2, dtype=torch.uint8),
            torch.zeros(1, 3, 2, 2, dtype=torch.uint8),
        )


def test_non_tensors_raise():
    with pytest.raises(TypeError, match=r"torch\.Tensor"):
        composite(torch.zeros(1, 3, 2, 2), [[0.0]], torch.zeros(1, 3, 2, 2))
