"""Backbones by name: ``@register_backbone("name")`` on a builder ``fn(*, pretrained, weights, home)``,
``build_backbone("name")`` to get one. With ``pretrained`` a builder loads ``weights`` or the usual ImageNet
weights, or raises AssetError: it never falls back to random weights.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from bgbias.errors import OptionError
from bgbias.registry import Registry

if TYPE_CHECKING:
    from bgbias.models.backbone import Backbone


class BackboneBuilder(Protocol):
    def __call__(self, *, pretrained: bool, weights: Path | None, home: Path | None) -> Backbone: ...


BACKBONES: Registry[BackboneBuilder] = Registry(
    "backbone", ("bgbias.models.torchvision_backbones", "bgbias.models.bninception", "bgbias.models.tiny_cnn")
)


def register_backbone(name: str) -> Callable[[BackboneBuilder], BackboneBuilder]:
    return BACKBONES.register(name)


def backbone_names() -> list[str]:
    """Every registered backbone, sorted (imports the built-in architectures, and so torch)."""
    return sorted(BACKBONES)


def build_backbone(
    name: str,
    *,
    pretrained: bool = True,
    weights: str | os.PathLike[str] | None = None,
    home: str | os.PathLike[str] | None = None,
    freeze_batchnorm: bool = True,
) -> Backbone:
    """Build backbone ``name``; ``weights`` replaces the default download, ``home`` holds assets."""
    builder = BACKBONES[name]
    if weights is not None and not pretrained:
        raise OptionError("a weight file was given together with random initialisation", path=weights,
                          fix="drop the weight file, or ask for pretrained weights")
    backbone = builder(pretrained=pretrained, weights=None if weights is None else Path(weights),
                       home=None if home is None else Path(home))
    backbone.freeze_batchnorm = freeze_batchnorm
    return backbone
