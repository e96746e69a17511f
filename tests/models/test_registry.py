"""The backbone registry: names, unknown names, and what build_backbone passes on."""

from __future__ import annotations

import pytest
import torch

from bgbias.errors import OptionError
from bgbias.models import registry
from bgbias.models.registry import backbone_names, build_backbone, register_backbone


def test_names_are_sorted_and_include_the_four_architectures():
    names = backbone_names()
    assert names == sorted(names)
    assert {"bninception", "googlenet", "mobilenet_v2", "resnet50"} <= set(names)


def test_an_unknown_name_is_an_option_error_listing_the_names():
    with pytest.raises(OptionError, match="unknown backbone 'vgg16'") as caught:
        build_backbone("vgg16", pretrained=False)
    assert all(name in caught.value.fix for name in backbone_names())


def test_a_weight_file_with_random_initialisation_is_refused(tmp_path):
    with pytest.raises(OptionError, match="random initialisation"):
        build_backbone("mobilenet_v2", pretrained=False, weights=tmp_path / "w.pth")


def test_freeze_batchnorm_is_passed_on():
    backbone = build_backbone("tiny_cnn", pretrained=False, freeze_batchnorm=False)
    assert not backbone.freeze_batchnorm
    assert all(m.training for m in backbone.modules() if isinstance(m, torch.nn.BatchNorm2d))


def test_a_name_cannot_be_registered_twice(monkeypatch):
    monkeypatch.setattr(registry, "BACKBONES", registry.BACKBONES.copy())

    def builder(*, pretrained, weights, home):
        raise AssertionError("not built in this test")

    register_backbone("tiny")(builder)
    register_backbone("tiny")(builder)  # the same builder again (a module re-import) is fine
    with pytest.raises(ValueError, match="already registered"):
        register_backbone("tiny")(lambda **kwargs: None)
