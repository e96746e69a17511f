"""InputConvention: channel swap, scale, mean and std, in the dtype and device of the batch."""

from __future__ import annotations

import pytest
import torch

from bgbias.models.input_convention import CAFFE_BGR, IMAGENET, SYMMETRIC, InputConvention


def test_imagenet_normalises_each_channel():
    images = torch.full((1, 3, 2, 2), 0.5)
    out = IMAGENET.apply(images)
    expected = [(0.5 - m) / s for m, s in zip(IMAGENET.mean, IMAGENET.std, strict=True)]
    torch.testing.assert_close(out[0, :, 0, 0], torch.tensor(expected))


def test_caffe_bgr_swaps_scales_and_subtracts_the_bgr_mean():
    images = torch.zeros(1, 3, 1, 1)
    images[0, 0] = 1.0  # pure red
    out = CAFFE_BGR.apply(images)[0, :, 0, 0]
    torch.testing.assert_close(out, torch.tensor([-104.0, -117.0, 255.0 - 128.0]))


def test_dtype_and_device_are_kept():
    images = torch.rand(2, 3, 4, 4, dtype=torch.float64)
    out = InputConvention(mean=(0.1, 0.2, 0.3), std=(1.0, 2.0, 4.0)).apply(images)
    assert out.dtype == torch.float64
    assert out.device == images.device


def test_wrong_shapes_and_integer_images_are_refused():
    with pytest.raises(ValueError, match=r"\(B, 3, H, W\)"):
        IMAGENET.apply(torch.rand(3, 4, 4))
    with pytest.raises(ValueError, match=r"\(B, 3, H, W\)"):
        IMAGENET.apply(torch.rand(1, 1, 4, 4))
    with pytest.raises(TypeError, match="float images"):
        IMAGENET.apply(torch.zeros(1, 3, 4, 4, dtype=torch.uint8))


@pytest.mark.parametrize(
    "convention", [IMAGENET, CAFFE_BGR, SYMMETRIC], ids=["imagenet", "caffe_bgr", "symmetric"]
)
def test_invert_undoes_apply(convention):
    images = torch.rand(2, 3, 5, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    torch.testing.assert_close(convention.invert(convention.apply(images)), images)
    inputs = torch.randn(2, 3, 5, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    torch.testing.assert_close(convention.apply(convention.invert(inputs)), inputs)


def test_invert_of_caffe_bgr_restores_rgb_order():
    inputs = torch.tensor([-104.0, -117.0, 255.0 - 128.0]).view(1, 3, 1, 1)
    torch.testing.assert_close(CAFFE_BGR.invert(inputs)[0, :, 0, 0], torch.tensor([1.0, 0.0, 0.0]))


def test_invert_is_differentiable_and_checks_shapes():
    inputs = torch.randn(1, 3, 2, 2, requires_grad=True)
    IMAGENET.invert(inputs).sum().backward()
    expected = torch.tensor(IMAGENET.std).view(1, 3, 1, 1).expand(1, 3, 2, 2)
    torch.testing.assert_close(inputs.grad, expected)
    with pytest.raises(ValueError, match=r"\(B, 3, H, W\)"):
        IMAGENET.invert(torch.rand(3, 2, 2))
    with pytest.raises(TypeError, match="float network inputs"):
        IMAGENET.invert(torch.zeros(1, 3, 2, 2, dtype=torch.uint8))
