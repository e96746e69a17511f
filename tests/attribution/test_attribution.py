"""The attribution registry and SmoothGrad: shape, range, determinism, batch independence, where the maps
concentrate, gradients in the network's input space, and no gradients left on parameters."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bgbias.attribution.foreground_score import foreground_score
from bgbias.attribution.smoothgrad import (
    SmoothGrad,
    distance_gradients,
    draw_noise,
    noisy_copies,
    normalise_maps,
    smoothgrad_maps,
)
from bgbias.errors import OptionError
from bgbias.methods import attribution as registry
from bgbias.methods.attribution import build_attribution, register_attribution
from bgbias.models.input_convention import CAFFE_BGR
from tests.attribution.tiny import REGION, RegionMethod, baseline

SIDE = 32


def images(count: int = 3, seed: int = 0) -> torch.Tensor:
    return torch.rand(count, 3, SIDE, SIDE, generator=torch.Generator().manual_seed(seed))


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def network():
    return baseline()


# ---------------------------------------------------------------------------------------------- registry
def test_smoothgrad_is_registered_with_the_seeds_defaults():
    assert "smoothgrad" in registry.ATTRIBUTIONS
    built = build_attribution("smoothgrad")
    assert isinstance(built, SmoothGrad)
    assert built.options() == {"copies": 25, "noise": 0.15, "clip_percentile": 99.0, "batch": 50}
    assert build_attribution("smoothgrad", copies=5).options()["copies"] == 5


def test_unknown_names_and_options_are_option_errors_listing_the_known_ones():
    with pytest.raises(OptionError, match="unknown attribution method 'gradcam'") as raised:
        build_attribution("gradcam")
    assert "smoothgrad" in raised.value.fix
    with pytest.raises(OptionError, match="sigma") as raised:
        build_attribution("smoothgrad", sigma=0.2)
    assert "copies" in raised.value.fix and "clip_percentile" in raised.value.fix


@pytest.mark.parametrize(
    "options", [{"copies": 0}, {"copies": 2.5}, {"noise": -0.1}, {"clip_percentile": 0}, {"batch": True}]
)
def test_invalid_smoothgrad_options_are_option_errors(options):
    with pytest.raises(OptionError, match=next(iter(options))):
        build_attribution("smoothgrad", **options)


def test_a_new_attribution_plugs_in_by_registering_a_name(monkeypatch):
    monkeypatch.setattr(registry, "ATTRIBUTIONS", registry.ATTRIBUTIONS.copy())

    @register_attribution("uniform")
    class Uniform:
        def __init__(self, level: float = 0.5):
            self.level = level

        def options(self):
            return {"level": self.level}

        def __call__(self, method, images01, generator):
            return torch.full((len(images01), *images01.shape[2:]), self.level)

    assert "uniform" in registry.ATTRIBUTIONS
    maps = build_attribution("uniform", level=0.25)(None, images(2), gen(0))
    assert maps.shape == (2, SIDE, SIDE) and float(maps.max()) == 0.25
    with pytest.raises(ValueError, match="registered twice"):
        register_attribution("uniform")(SmoothGrad)


# ------------------------------------------------------------------------------------------ the pieces
def test_smoothgrad_maps_take_the_signed_channel_mean_before_the_absolute_value():
    gradients = torch.zeros(1, 2, 3, 1, 2)
    gradients[0, :, :, 0, 0] = torch.tensor([1.0, -1.0, 0.0])  # channels cancel
    gradients[0, 0, :, 0, 1] = torch.tensor([-3.0, 0.0, 0.0])
    gradients[0, 1, :, 0, 1] = torch.tensor([3.0, 3.0, 3.0])
    torch.testing.assert_close(smoothgrad_maps(gradients), torch.tensor([[[0.0, 1.0 + 3.0]]]))


def test_normalise_maps_clips_at_the_percentile_and_handles_flat_maps():
    ramp = torch.arange(101.0).view(1, 1, 101) + 5
    out = normalise_maps(ramp, 90.0)
    torch.testing.assert_close(out, ((ramp - 5) / 90).clamp(0, 1))
    assert float(out.max()) == 1.0 and int((out == 1).sum()) == 11
    flat = torch.full((1, 4, 4), 3.0)
    assert float(normalise_maps(flat, 99.0).abs().max()) == 0.0
    hot = torch.zeros(1, 20, 20)
    hot[0, 3, 4] = 7.0  # fewer than 1 % of pixels: the 99th percentile equals the minimum
    out = normalise_maps(hot, 99.0)
    assert float(out[0, 3, 4]) == 1.0 and float(out.sum()) == 1.0


def test_noise_is_scaled_by_each_images_range():
    inputs = torch.zeros(2, 3, 2, 2)
    inputs[0, 0, 0, 0] = 2.0
    inputs[1, 0, 0, 0] = 10.0
    unit = torch.ones(2, 4, 3, 2, 2)
    noisy = noisy_copies(inputs, unit, 0.5)
    assert noisy.shape == (2, 4, 3, 2, 2)
    torch.testing.assert_close(noisy[0, :, 1], torch.full((4, 2, 2), 1.0))
    torch.testing.assert_close(noisy[1, :, 1], torch.full((4, 2, 2), 5.0))


def test_noise_of_an_image_depends_only_on_its_generator():
    inputs = images(2)
    pair = draw_noise(inputs, 3, [gen(1), gen(2)])
    torch.testing.assert_close(pair[1], draw_noise(inputs[:1], 3, [gen(2)])[0])


def test_gradients_are_taken_in_the_networks_input_space():
    method = RegionMethod(CAFFE_BGR).eval()
    inputs = CAFFE_BGR.apply(images(2))
    noisy = noisy_copies(inputs, draw_noise(inputs, 3, [gen(0), gen(1)]), 0.15)
    reference = method.embed(torch.zeros(1, 3, SIDE, SIDE)).detach()
    gradients = distance_gradients(method, noisy, reference)
    leaf = noisy.detach().flatten(0, 1).requires_grad_(True)
    distances = torch.cdist(method.backbone.blocks["region"](leaf), reference).view(2, 3)
    (expected,) = torch.autograd.grad(distances.mean(dim=1).sum(), leaf)
    torch.testing.assert_close(gradients, expected.view(noisy.shape), rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------------------------------ the whole
def test_maps_have_the_image_shape_lie_in_the_unit_range_and_leave_no_gradients(network):
    network.train()
    maps = SmoothGrad(copies=4)(network, images(3), gen(0))
    assert maps.shape == (3, SIDE, SIDE) and maps.dtype == torch.float32
    assert float(maps.min()) == 0.0 and float(maps.max()) == 1.0
    assert not network.training
    assert all(parameter.grad is None for parameter in network.parameters())


def test_maps_are_deterministic_for_a_generator_and_independent_of_the_batch(network):
    attribution = SmoothGrad(copies=4, batch=8)
    batch = images(3)
    first = attribution(network, batch, gen(0))
    torch.testing.assert_close(attribution(network, batch, gen(0)), first, rtol=0, atol=0)
    assert not torch.allclose(attribution(network, batch, gen(1)), first)
    own = attribution(network, batch, [gen(5), gen(6), gen(7)])
    alone = attribution(network, batch[2:], gen(7))
    torch.testing.assert_close(own[2], alone[0], rtol=1e-4, atol=1e-4)


def test_maps_concentrate_on_the_pixels_the_embedding_sees():
    method = RegionMethod()
    maps = SmoothGrad(copies=8)(method, images(2), gen(0))
    top, bottom, left, right = REGION
    mask = np.zeros((SIDE, SIDE))
    mask[top:bottom, left:right] = 1.0
    for attribution_map in maps.numpy():
        assert foreground_score(mask, attribution_map) > 0.99
        assert attribution_map[top:bottom, left:right].mean() > 0.3


class NearReferenceMethod(RegionMethod):
    """Unit embeddings within ~1e-4 of each other and of the black image's, as a weak network gives."""

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        features = super().embed(images)
        return torch.nn.functional.normalize(1.0 + 1e-4 * features, dim=1)


def test_maps_do_not_depend_on_how_many_copies_share_a_pass():
    # 2 images × 13 copies = 26 rows in one pass: more than torch.cdist's 25-row switch to its imprecise
    # matrix-product formula, which used to turn these gradients into rounding noise.
    method, batch = NearReferenceMethod(), images(2)
    together = SmoothGrad(copies=13, batch=26)(method, batch, [gen(0), gen(1)])
    alone = torch.cat([SmoothGrad(copies=13)(method, batch[i : i + 1], gen(i)) for i in range(2)])
    torch.testing.assert_close(together, alone, rtol=1e-4, atol=1e-4)
