"""The contract every backbone keeps; the training engine and the methods are written against it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bgbias.errors import OptionError
from bgbias.models.input_convention import CAFFE_BGR, IMAGENET, SYMMETRIC, InputConvention
from bgbias.models.registry import backbone_names

EXPECTED_CONVENTIONS = {
    "bninception": CAFFE_BGR,
    "googlenet": SYMMETRIC,
    "mobilenet_v2": IMAGENET,
    "resnet50": IMAGENET,
    "tiny_cnn": SYMMETRIC,
}


def batchnorms(module: nn.Module) -> list[nn.BatchNorm2d]:
    return [m for m in module.modules() if isinstance(m, nn.BatchNorm2d)]


def normalise_by_hand(images: torch.Tensor, convention: InputConvention) -> torch.Tensor:
    channels = images[:, [2, 1, 0]] if convention.bgr else images
    planes = [(channels[:, c] * convention.scale - convention.mean[c]) / convention.std[c] for c in range(3)]
    return torch.stack(planes, dim=1)


def test_the_four_backbones_are_registered():
    assert set(EXPECTED_CONVENTIONS) <= set(backbone_names())


@pytest.mark.slow
def test_every_tap_has_the_declared_channels(backbone, images):
    outputs = backbone(images, taps=backbone.stages)
    assert list(outputs) == list(backbone.stages)
    for stage, feature_map in outputs.items():
        assert feature_map.ndim == 4
        assert feature_map.shape[:2] == (2, backbone.channels[stage]), stage
    assert list(backbone(images)) == [backbone.final] == [backbone.stages[-1]]


def test_levels_are_three_stages_from_low_to_high(backbone):
    positions = [backbone.stages.index(level) for level in backbone.levels]
    assert len(positions) == 3
    assert positions == sorted(positions)
    assert len(set(positions)) == 3
    assert backbone.levels[-1] == backbone.final


@pytest.mark.slow
def test_forward_from_continues_exactly_where_the_full_pass_was(backbone, images):
    """One 32-px image (BN-Inception's smallest): a pass from every stage costs about one full pass each."""
    backbone.eval()
    with torch.no_grad():
        full = backbone(images[:1, :, :32, :32], taps=backbone.stages)
        for index, stage in enumerate(backbone.stages[:-1]):
            later = backbone.stages[index + 1 :]
            resumed = backbone.forward_from(stage, full[stage], taps=later)
            assert list(resumed) == list(later)
            for tap in later:
                torch.testing.assert_close(resumed[tap], full[tap], rtol=1e-5, atol=1e-5)
            assert list(backbone.forward_from(stage, full[stage])) == [backbone.final]
        # the stage itself may be asked for: it is the input, unchanged
        final = backbone.forward_from(backbone.final, full[backbone.final])
        assert final[backbone.final] is full[backbone.final]


@pytest.mark.slow
def test_forward_from_supports_second_order_gradients(backbone, images):
    """SAM differentiates the similarity w.r.t. a feature map and trains through that gradient."""
    middle = backbone.levels[1]
    features = backbone(images, taps=[middle])[middle].detach().requires_grad_(True)
    score = backbone.forward_from(middle, features)[backbone.final].pow(2).sum()
    (gradient,) = torch.autograd.grad(score, features, create_graph=True)
    gradient.pow(2).sum().backward()
    later_weights = [p for p in backbone.blocks[backbone.final].parameters() if p.ndim == 4]
    assert later_weights[0].grad is not None
    assert later_weights[0].grad.abs().sum() > 0


def test_asking_for_an_early_tap_runs_no_later_block(backbone, images):
    ran: list[str] = []
    for name, block in backbone.blocks.items():
        block.register_forward_hook(lambda module, args, out, name=name: ran.append(name))
    outputs = backbone(images, taps=[backbone.stages[1]])
    assert list(outputs) == [backbone.stages[1]]
    assert ran == list(backbone.stages[:2])


def test_unknown_or_too_early_taps_are_option_errors_listing_the_stages(backbone, images):
    with pytest.raises(OptionError, match="unknown backbone stage 'nope'") as caught:
        backbone(images, taps=["nope"])
    assert all(stage in caught.value.fix for stage in backbone.stages)
    with pytest.raises(OptionError, match="unknown backbone stage"):
        backbone.forward_from("nope", images)
    with pytest.raises(OptionError, match="no backbone stage requested"):
        backbone(images, taps=[])
    second = backbone.stages[1]
    with pytest.raises(OptionError, match=f"stage '{backbone.stages[0]}' comes before '{second}'"):
        backbone.forward_from(second, torch.zeros(1), taps=[backbone.stages[0]])


def test_frozen_batchnorm_stays_in_eval_mode_and_keeps_its_statistics(backbone, images):
    assert backbone.freeze_batchnorm
    backbone.train()
    norms = batchnorms(backbone)
    assert norms
    assert backbone.training
    assert not any(norm.training for norm in norms)
    assert all(norm.weight.requires_grad for norm in norms)
    before = norms[0].running_mean.clone()
    backbone(images)
    torch.testing.assert_close(norms[0].running_mean, before, rtol=0, atol=0)


def test_unfrozen_batchnorm_trains(backbone, images):
    backbone.freeze_batchnorm = False
    backbone.train()
    norms = batchnorms(backbone)
    assert all(norm.training for norm in norms)
    before = norms[0].running_mean.clone()
    backbone(images)
    assert not torch.equal(norms[0].running_mean, before)
    backbone.freeze_batchnorm = True
    assert not any(norm.training for norm in norms)
    assert backbone.training


def test_the_input_convention_is_applied_first(backbone, images, request):
    name = request.node.callspec.params["backbone"]
    assert backbone.convention == EXPECTED_CONVENTIONS[name]
    seen: list[torch.Tensor] = []
    first = backbone.blocks[backbone.stages[0]]
    first.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    backbone(images, taps=[backbone.stages[0]])
    torch.testing.assert_close(seen[0], normalise_by_hand(images, backbone.convention))


def test_gradients_reach_the_first_convolution(backbone, images):
    backbone.train()
    backbone(images)[backbone.final].mean().backward()
    first_conv = next(m for m in backbone.modules() if isinstance(m, nn.Conv2d))
    assert first_conv.weight.grad is not None
    assert first_conv.weight.grad.abs().sum() > 0


def test_state_dict_keys_live_under_blocks_and_their_stage(backbone):
    prefixes = {key.split(".")[0] for key in backbone.state_dict()}
    stages = {key.split(".")[1] for key in backbone.state_dict()}
    assert prefixes == {"blocks"}
    assert stages <= set(backbone.stages)
