"""The U²-Net modules themselves (random weights): the size of each network, the output's shape at sizes the
pools do not divide, and that images of a batch do not see each other."""

from __future__ import annotations

import pytest
import torch

from bgbias.saliency.u2net_network import U2NET, U2NETP, U2Net, U2NetShape


def _seeded(shape: U2NetShape) -> U2Net:
    torch.manual_seed(0)
    return U2Net(shape).eval()


@pytest.mark.parametrize(("shape", "parameters"), [(U2NETP, 1_125_485), (U2NET, 43_981_069)],
                         ids=["u2netp", "u2net"])
def test_parameter_counts_are_those_of_rembgs_files(shape, parameters):
    # The sums of the initializers' sizes in rembg's u2netp.onnx and u2net.onnx.
    assert sum(parameter.numel() for parameter in U2Net(shape).parameters()) == parameters


@pytest.mark.slow
@pytest.mark.parametrize("shape", [U2NETP, U2NET], ids=["u2netp", "u2net"])
@pytest.mark.parametrize(("height", "width"), [(97, 131), (45, 29)])
def test_odd_sizes_come_back_at_their_own_size_as_probabilities(shape, height, width):
    with torch.no_grad():
        saliency = _seeded(shape)(torch.randn(1, 3, height, width))
    assert saliency.shape == (1, 1, height, width)
    assert torch.isfinite(saliency).all()
    assert saliency.min() >= 0 and saliency.max() <= 1


@pytest.mark.slow
def test_each_image_of_a_batch_gives_what_it_gives_alone():
    model = _seeded(U2NETP)
    torch.manual_seed(1)
    images = torch.randn(3, 3, 64, 80)
    with torch.no_grad():
        batched = model(images)
        alone = torch.cat([model(image[None]) for image in images])
    assert batched.shape == (3, 1, 64, 80)
    torch.testing.assert_close(batched, alone, atol=1e-5, rtol=0)
