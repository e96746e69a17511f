"""BN-Inception (Ioffe & Szegedy 2015), the paper's backbone, as Cadene's ``pretrainedmodels`` ports it.

Facts of that port that the ImageNet file ``bn_inception-52deb4733.pth`` depends on: every convolution has a
bias and is followed by BatchNorm (eps 1e-5) and ReLU; 7×7 and 3×3 convolutions are padded to keep their size;
the stem's max-pools and the max-pools of the two reduction blocks (``inception_3c``, ``inception_4e``: 3×3,
stride 2, no padding) use ``ceil_mode``; the pool branch of ordinary blocks is a 3×3 average pool (stride 1,
padding 1, padding counted), except ``inception_5b``, which max-pools. Input: BGR, 0–255, mean
(104, 117, 128).

A unit keeps the port's name (:func:`pretrainedmodels_key`): weights are matched by name, never by position.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from bgbias.errors import AssetError, OptionError
from bgbias.models import weights as weight_files
from bgbias.models.backbone import Backbone
from bgbias.models.input_convention import CAFFE_BGR
from bgbias.models.registry import register_backbone

URL = "http://data.lip6.fr/cadene/pretrainedmodels/bn_inception-52deb4733.pth"
FILENAME = "bn_inception-52deb4733.pth"
LEVELS = ("inception_3c", "inception_4e", "inception_5b")


@dataclass(frozen=True)
class InceptionSpec:
    """Widths of one inception block; reduction blocks (stride 2) have no 1×1 branch."""

    in_channels: int
    c1x1: int | None
    c3x3: tuple[int, int]  # (reduce, out)
    double_3x3: tuple[int, int]  # (reduce, out), two 3×3 convolutions
    pool: str  # "avg" or "max"
    pool_proj: int | None
    stride: int = 1

    @property
    def out_channels(self) -> int:
        pooled = self.pool_proj if self.pool_proj is not None else self.in_channels
        return (self.c1x1 or 0) + self.c3x3[1] + self.double_3x3[1] + pooled


SPECS: dict[str, InceptionSpec] = {
    "inception_3a": InceptionSpec(192, 64, (64, 64), (64, 96), "avg", 32),
    "inception_3b": InceptionSpec(256, 64, (64, 96), (64, 96), "avg", 64),
    "inception_3c": InceptionSpec(320, None, (128, 160), (64, 96), "max", None, stride=2),
    "inception_4a": InceptionSpec(576, 224, (64, 96), (96, 128), "avg", 128),
    "inception_4b": InceptionSpec(576, 192, (96, 128), (96, 128), "avg", 128),
    "inception_4c": InceptionSpec(576, 160, (128, 160), (128, 160), "avg", 128),
    "inception_4d": InceptionSpec(608, 96, (128, 192), (160, 192), "avg", 128),
    "inception_4e": InceptionSpec(608, None, (128, 192), (192, 256), "max", None, stride=2),
    "inception_5a": InceptionSpec(1056, 352, (192, 320), (160, 224), "avg", 128),
    "inception_5b": InceptionSpec(1024, 352, (192, 320), (192, 224), "max", 128),
}


def conv_bn_relu(in_channels: int, out_channels: int, kernel: int, stride: int = 1) -> nn.Sequential:
    """The unit BN-Inception is made of: convolution (with bias, size-keeping padding), BatchNorm, ReLU."""
    conv = nn.Conv2d(in_channels, out_channels, kernel, stride=stride, padding=kernel // 2)
    return nn.Sequential(OrderedDict(conv=conv, bn=nn.BatchNorm2d(out_channels), relu=nn.ReLU(inplace=True)))


class InceptionBlock(nn.ModuleDict):
    """Parallel branches concatenated along channels; the units are named as in the port."""

    def __init__(self, spec: InceptionSpec):
        units: dict[str, nn.Module] = {}
        if spec.c1x1 is not None:
            units["1x1"] = conv_bn_relu(spec.in_channels, spec.c1x1, 1)
        units["3x3_reduce"] = conv_bn_relu(spec.in_channels, spec.c3x3[0], 1)
        units["3x3"] = conv_bn_relu(spec.c3x3[0], spec.c3x3[1], 3, spec.stride)
        units["double_3x3_reduce"] = conv_bn_relu(spec.in_channels, spec.double_3x3[0], 1)
        units["double_3x3_1"] = conv_bn_relu(spec.double_3x3[0], spec.double_3x3[1], 3)
        units["double_3x3_2"] = conv_bn_relu(spec.double_3x3[1], spec.double_3x3[1], 3, spec.stride)
        units["pool"] = _pool(spec)
        if spec.pool_proj is not None:
            units["pool_proj"] = conv_bn_relu(spec.in_channels, spec.pool_proj, 1)
        super().__init__(units)

    def forward(self, x: Tensor) -> Tensor:
        branches = [self["1x1"](x)] if "1x1" in self else []
        branches.append(self["3x3"](self["3x3_reduce"](x)))
        branches.append(self["double_3x3_2"](self["double_3x3_1"](self["double_3x3_reduce"](x))))
        pooled = self["pool"](x)
        branches.append(self["pool_proj"](pooled) if "pool_proj" in self else pooled)
        # Under torch.jit.trace sizes are tensors, which a set cannot compare; torch.cat still checks them.
        sizes = set() if torch.jit.is_tracing() else {tuple(branch.shape[2:]) for branch in branches}
        if len(sizes) > 1:
            raise OptionError(
                f"BN-Inception cannot take this input size: a {tuple(x.shape[2:])} map splits into "
                f"branches of sizes {sorted(sizes)}",
                fix="use an input size that is a multiple of 32 (e.g. 224), or 227",
            )
        return torch.cat(branches, dim=1)


def _pool(spec: InceptionSpec) -> nn.Module:
    if spec.stride == 2:
        return nn.MaxPool2d(3, stride=2, ceil_mode=True)
    if spec.pool == "max":
        return nn.MaxPool2d(3, stride=1, padding=1, ceil_mode=True)
    return nn.AvgPool2d(3, stride=1, padding=1, ceil_mode=True, count_include_pad=True)


def stem() -> nn.Sequential:
    """conv 7×7/2 -> max-pool 3×3/2 -> conv 1×1 -> conv 3×3 -> max-pool 3×3/2: 3 -> 192 channels, stride 8."""
    return nn.Sequential(
        OrderedDict(
            conv1_7x7_s2=conv_bn_relu(3, 64, 7, stride=2),
            pool1_3x3_s2=nn.MaxPool2d(3, stride=2, ceil_mode=True),
            conv2_3x3_reduce=conv_bn_relu(64, 64, 1),
            conv2_3x3=conv_bn_relu(64, 192, 3),
            pool2_3x3_s2=nn.MaxPool2d(3, stride=2, ceil_mode=True),
        )
    )


def bninception(*, freeze_batchnorm: bool = True) -> Backbone:
    """A randomly initialised BN-Inception backbone."""
    blocks: list[tuple[str, nn.Module]] = [("stem", stem())]
    blocks += [(name, InceptionBlock(spec)) for name, spec in SPECS.items()]
    channels = {"stem": 192} | {name: spec.out_channels for name, spec in SPECS.items()}
    return Backbone(
        blocks, channels=channels, levels=LEVELS, convention=CAFFE_BGR, freeze_batchnorm=freeze_batchnorm
    )


def pretrainedmodels_key(key: str) -> str:
    """``blocks.<stage>.<unit>.<conv|bn>.<tensor>`` → pretrainedmodels' ``[<stage>_]<unit>[_bn].<tensor>``."""
    _, stage, unit, layer, tensor = key.split(".")
    name = unit if stage == "stem" else f"{stage}_{unit}"
    return f"{name}_bn.{tensor}" if layer == "bn" else f"{name}.{tensor}"


def load_pretrainedmodels_weights(backbone: Backbone, path: str | Path) -> Backbone:
    """Load pretrainedmodels' BN-Inception file into ``backbone``, matched by name and shape."""
    fix = f"pass pretrainedmodels' BN-Inception ImageNet weights ({URL}) with --weights PATH"
    weight_files.load_state_file(backbone, path, fix=fix, source_key=pretrainedmodels_key,
                                 unused=lambda key: key.startswith("last_linear."))
    return backbone


def imagenet_weights_file(home: str | Path | None = None) -> Path:
    """The ImageNet weight file in ``<home>/weights/``, downloaded there first when it is missing."""
    target = weight_files.weights_dir(home) / FILENAME
    if target.is_file():
        return target
    try:
        return weight_files.download_file(URL, target)
    except Exception as err:  # no network shows up as URLError, OSError, HTTPError, timeouts, ...
        raise AssetError(
            f"no ImageNet weights for BN-Inception: no local file, and downloading {URL} failed ({err})",
            path=target,
            fix=f"on a machine with internet download {URL} and pass --weights PATH (or put it at {target})",
        ) from err


@register_backbone("bninception")
def build_bninception(*, pretrained: bool, weights: Path | None, home: Path | None) -> Backbone:
    """BN-Inception; ImageNet weights from ``weights``, else ``<home>/weights/`` (downloaded if missing)."""
    backbone = bninception()
    if pretrained:
        path = weights if weights is not None else imagenet_weights_file(home)
        load_pretrainedmodels_weights(backbone, path)
    return backbone
