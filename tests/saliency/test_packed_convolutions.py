"""The CPU's packed convolutions (random weights): the shapes they are packed for, and that the packed network
computes what the plain one does."""

from __future__ import annotations

import pytest
import torch

from bgbias.saliency.packed_convolutions import (
    PackedConvRelu,
    can_pack,
    conv_relu_input_shapes,
    pack_convolutions,
)
from bgbias.saliency.u2net_network import U2NET, U2NETP, ConvRelu, U2Net

pytestmark = pytest.mark.skipif(not can_pack(), reason="this torch has no oneDNN CPU convolutions")


def _seeded_u2netp() -> U2Net:
    torch.manual_seed(0)
    return U2Net(U2NETP).eval().to(memory_format=torch.channels_last)


@pytest.mark.parametrize("shape", [U2NETP, pytest.param(U2NET, marks=pytest.mark.slow)],
                         ids=["u2netp", "u2net"])
def test_every_conv_relu_gets_the_shape_it_sees_at_320_pixels(shape):
    layers = {name: module for name, module in U2Net(shape).named_modules() if isinstance(module, ConvRelu)}
    shapes = dict(conv_relu_input_shapes(shape, batch=2))
    assert shapes.keys() == layers.keys()
    assert shapes["encoder.0.input"] == (2, 3, 320, 320)
    assert shapes["encoder.5.input"] == (2, shape.encoder[5][0], 10, 10)  # after five halvings
    for name, (batch, channels, _, _) in shapes.items():
        assert batch == 2 and channels == layers[name].conv.in_channels, name


@pytest.mark.parametrize("batch", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_the_packed_network_computes_what_the_plain_one_does(batch):
    plain = _seeded_u2netp()
    packed = pack_convolutions(_seeded_u2netp(), batch)
    assert not any(isinstance(module, ConvRelu) for module in packed.modules())
    assert sum(isinstance(module, PackedConvRelu) for module in packed.modules()) == len(
        conv_relu_input_shapes(U2NETP, batch))
    torch.manual_seed(1)
    images = torch.randn(batch, 3, 320, 320).contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        expected, got = plain(images), packed(images)
    assert got.shape == expected.shape == (batch, 1, 320, 320)
    assert (got - expected).abs().max().item() <= 1e-5
