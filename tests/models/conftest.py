"""Randomly initialised backbones, built once per session and copied for each test (building is slow)."""

from __future__ import annotations

import copy

import pytest
import torch

from bgbias.models.backbone import Backbone
from bgbias.models.registry import backbone_names, build_backbone

_BUILT: dict[str, Backbone] = {}


def random_backbone(name: str) -> Backbone:
    """A fresh copy of backbone ``name`` with seeded random weights and frozen BatchNorm."""
    if name not in _BUILT:
        torch.manual_seed(0)
        _BUILT[name] = build_backbone(name, pretrained=False)
    return copy.deepcopy(_BUILT[name])


@pytest.fixture(params=backbone_names())
def backbone(request) -> Backbone:
    return random_backbone(request.param)


@pytest.fixture
def images() -> torch.Tensor:
    """Two 64×64 RGB images in [0, 1]."""
    return torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
