"""MobileNetV2, ResNet-50 and GoogLeNet from torchvision, cut into named stages.

Weights load into the whole torchvision model under its own keys, then the model is cut, so our keys are
``blocks.<stage>.<torchvision's key>``. ResNet-50 and GoogLeNet take ImageNet weights from ``--weights PATH``
or torchvision's download (torch hub's cache, so their builders ignore ``home``). MobileNetV2's stages are
named by output stride (``final``: the last 1×1 conv); GoogLeNet's max-pools between groups open the next
stage: ``inception3b`` is at stride 8 and ``inception4e`` at 16, as ResNet-50's ``layer2`` and ``layer3``.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

import torchvision
from torch import nn

from bgbias.errors import AssetError
from bgbias.models import pretrained as offline
from bgbias.models import weights as weight_files
from bgbias.models.backbone import Backbone
from bgbias.models.input_convention import IMAGENET, SYMMETRIC
from bgbias.models.registry import register_backbone


@register_backbone("mobilenet_v2")
def build_mobilenet_v2(*, pretrained: bool, weights: Path | None, home: Path | None) -> Backbone:
    """torchvision MobileNetV2; ImageNet weights from the offline asset (or torchvision's download)."""
    model = torchvision.models.mobilenet_v2(weights=None)
    if pretrained and weights is not None:
        url = torchvision.models.MobileNet_V2_Weights.IMAGENET1K_V1.url
        _load_file(model, weights, name="mobilenet_v2", heads=("classifier.",), url=url)
    elif pretrained:
        offline.load_mobilenet_v2_imagenet(model, home=home)
    features = model.features
    cut = {"stride2": (0, 2), "stride4": (2, 4), "stride8": (4, 7), "stride16": (7, 14), "stride32": (14, 18)}
    blocks = [(stage, features[begin:end]) for stage, (begin, end) in cut.items()]
    blocks.append(("final", features[18:]))
    channels = {"stride2": 16, "stride4": 24, "stride8": 32, "stride16": 96, "stride32": 320, "final": 1280}
    return Backbone(blocks, channels=channels, levels=("stride8", "stride16", "final"), convention=IMAGENET)


@register_backbone("resnet50")
def build_resnet50(*, pretrained: bool, weights: Path | None, home: Path | None) -> Backbone:
    """torchvision ResNet-50; ImageNet weights (IMAGENET1K_V1) from ``weights`` or torchvision's download."""
    model = torchvision.models.resnet50(weights=None)
    if pretrained:
        imagenet = torchvision.models.ResNet50_Weights.IMAGENET1K_V1
        _load_imagenet(model, weights, imagenet, "resnet50", ("fc.",))
    layers = ("layer1", "layer2", "layer3", "layer4")
    blocks = [("stem", _sequence(model, "conv1", "bn1", "relu", "maxpool"))]
    blocks += [(name, getattr(model, name)) for name in layers]
    channels = {"stem": 64, "layer1": 256, "layer2": 512, "layer3": 1024, "layer4": 2048}
    return Backbone(blocks, channels=channels, levels=("layer2", "layer3", "layer4"), convention=IMAGENET)


@register_backbone("googlenet")
def build_googlenet(*, pretrained: bool, weights: Path | None, home: Path | None) -> Backbone:
    """torchvision GoogLeNet without its auxiliary heads, fed ``(x − 0.5) / 0.5`` as its weights expect."""
    # aux heads exist only so that torchvision's weight file loads; they are not part of any stage
    model = torchvision.models.googlenet(weights=None, aux_logits=True, transform_input=False,
                                         init_weights=not pretrained)
    if pretrained:
        heads = ("fc.", "aux1.", "aux2.")
        _load_imagenet(model, weights, torchvision.models.GoogLeNet_Weights.IMAGENET1K_V1, "googlenet", heads)
    channels = {"stem": 192, "inception3a": 256, "inception3b": 480, "inception4a": 512,
                "inception4b": 512, "inception4c": 512, "inception4d": 528, "inception4e": 832,
                "inception5a": 832, "inception5b": 1024}
    opened_by = {"inception4a": "maxpool3", "inception5a": "maxpool4"}  # the max-pool between groups
    blocks = [("stem", _sequence(model, "conv1", "maxpool1", "conv2", "conv3", "maxpool2"))]
    blocks += [(name, _sequence(model, opened_by[name], name) if name in opened_by else getattr(model, name))
               for name in list(channels)[1:]]
    levels = ("inception3b", "inception4e", "inception5b")
    return Backbone(blocks, channels=channels, levels=levels, convention=SYMMETRIC)


def _sequence(model: nn.Module, *names: str) -> nn.Sequential:
    return nn.Sequential(OrderedDict((name, getattr(model, name)) for name in names))


def _load_imagenet(
    model: nn.Module, weights: Path | None, imagenet: Any, name: str, heads: tuple[str, ...]
) -> None:
    """Load ``weights`` if given, else torchvision's ImageNet weights (torch hub cache or download)."""
    if weights is not None:
        _load_file(model, weights, name=name, heads=heads, url=imagenet.url)
        return
    try:
        state = weight_files.torchvision_state(imagenet)
    except Exception as err:  # no network shows up as URLError, OSError, HTTPError, ...
        raise AssetError(
            f"no ImageNet weights for {name}: torchvision's download failed ({err})",
            fix=_manual_fix(imagenet.url),
        ) from err
    fitted = weight_files.fit_state(model.state_dict(), state, unused=lambda key: key.startswith(heads),
                                    path=None, fix=_manual_fix(imagenet.url))
    model.load_state_dict(fitted, strict=False)


def _load_file(model: nn.Module, path: Path, *, name: str, heads: tuple[str, ...], url: str) -> None:
    weight_files.load_state_file(model, path, fix=f"pass a torchvision {name} state dict, such as {url}",
                                 unused=lambda key: key.startswith(heads))


def _manual_fix(url: str) -> str:
    return f"on a machine with internet download {url}, copy it here and pass --weights PATH"
