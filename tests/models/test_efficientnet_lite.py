"""Our EfficientNet-Lite0: its shape, TensorFlow's SAME padding, the key table of the reference file, and a
loader that takes a file in that layout whole or refuses it naming the file and the key (generated weights
only: the real file is the asset ``efficientnet_lite0``)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bgbias.errors import AssetError
from bgbias.models.efficientnet_lite import (
    EfficientNetLite0,
    ImageNetInput,
    SamePaddedConv2d,
    load_reference_weights,
    reference_key,
)
from bgbias.models.input_convention import EFFICIENTNET_LITE, IMAGENET


@pytest.fixture(scope="module")
def lite0() -> EfficientNetLite0:
    return EfficientNetLite0().eval()


def _reference_layout(model: EfficientNetLite0, seed: int = 0) -> dict[str, torch.Tensor]:
    """The model's tensors under the reference file's names, with random values."""
    generator = torch.Generator().manual_seed(seed)
    return {reference_key(key): torch.randn(tensor.shape, generator=generator) if tensor.is_floating_point()
            else tensor + 3 for key, tensor in model.state_dict().items()}


def test_lite0_has_the_reference_files_tensors_and_shapes(lite0):
    state = lite0.state_dict()
    assert len(state) == 296  # as many tensors as efficientnet-lite0-57934424.pth holds
    assert sum(p.numel() for p in lite0.parameters()) == 4_652_008
    assert len(lite0.blocks) == 16
    assert tuple(state["stem.conv.weight"].shape) == (32, 3, 3, 3)
    assert tuple(state["blocks.15.project.conv.weight"].shape) == (320, 1152, 1, 1)
    assert tuple(state["head.conv.weight"].shape) == (1280, 320, 1, 1)
    assert lite0.blocks[0].expand is None and lite0.blocks[1].expand is not None
    assert not any(isinstance(m, torch.nn.Conv2d) and m.bias is not None for m in lite0.modules())
    assert all(bn.eps == 1e-3 and bn.momentum == 0.01
               for bn in lite0.modules() if isinstance(bn, torch.nn.BatchNorm2d))
    with torch.no_grad():
        assert lite0(torch.rand(2, 3, 65, 65)).shape == (2, 1000)


@pytest.mark.parametrize(("side", "kernel", "stride", "pads"), [
    (6, 3, 2, (0, 1)), (5, 3, 2, (1, 1)), (6, 5, 2, (1, 2)), (7, 5, 1, (2, 2)), (7, 3, 2, (1, 1))])
def test_convolutions_pad_as_tensorflows_same(side, kernel, stride, pads):
    conv = SamePaddedConv2d(2, 3, kernel, stride=stride, bias=False)
    x = torch.rand(1, 2, side, side)
    expected = F.conv2d(F.pad(x, [*pads, *pads]), conv.weight, stride=stride)
    out = conv(x)
    assert out.shape[-1] == -(-side // stride)
    torch.testing.assert_close(out, expected)


def test_reference_key_table():
    assert reference_key("stem.conv.weight") == "_conv_stem.weight"
    assert reference_key("stem.bn.running_mean") == "_bn0.running_mean"
    assert reference_key("blocks.0.depthwise.conv.weight") == "_blocks.0._depthwise_conv.weight"
    assert reference_key("blocks.3.expand.bn.bias") == "_blocks.3._bn0.bias"
    assert reference_key("blocks.3.depthwise.bn.running_var") == "_blocks.3._bn1.running_var"
    assert reference_key("blocks.15.project.bn.num_batches_tracked") == "_blocks.15._bn2.num_batches_tracked"
    assert reference_key("head.bn.weight") == "_bn1.weight"
    assert reference_key("classifier.1.bias") == "_fc.bias"


def test_a_file_in_the_reference_layout_round_trips(tmp_path, lite0):
    state = _reference_layout(lite0)
    torch.save(state, tmp_path / "lite0.pth")
    model = load_reference_weights(EfficientNetLite0(), tmp_path / "lite0.pth", fix="fetch it")
    for key, tensor in model.state_dict().items():
        assert torch.equal(tensor, state[reference_key(key)]), key


@pytest.mark.parametrize(("change", "message"), [
    (lambda s: s.update({"_blocks.4._bn1.weight": torch.zeros(7)}),
     "'_blocks.4._bn1.weight' in the weight file has shape (7,), the model needs (240,)"),
    (lambda s: s.pop("_conv_head.weight"), "the weight file lacks '_conv_head.weight'"),
    (lambda s: s.update({"_blocks.16._bn0.weight": torch.zeros(3)}),
     "the weight file holds '_blocks.16._bn0.weight', which this model does not have"),
], ids=["wrong shape", "missing key", "extra key"])
def test_a_file_that_does_not_fit_is_refused_naming_the_file_and_key(tmp_path, lite0, change, message):
    state = _reference_layout(lite0)
    change(state)
    path = tmp_path / "lite0.pth"
    torch.save(state, path)
    with pytest.raises(AssetError) as info:
        load_reference_weights(EfficientNetLite0(), path, fix="fetch it again")
    assert message in info.value.problem
    assert info.value.path == str(path) and info.value.fix == "fetch it again"


def test_imagenet_input_is_renormalised_to_lite0s_own(lite0):
    images = torch.rand(2, 3, 40, 40)
    with torch.no_grad():
        expected = lite0(EFFICIENTNET_LITE.apply(images))
        given = ImageNetInput(lite0)(IMAGENET.apply(images))
    torch.testing.assert_close(given, expected, rtol=1e-4, atol=1e-4)
    assert EFFICIENTNET_LITE.apply(torch.full((1, 3, 1, 1), 127 / 255)).abs().max() < 1e-6
