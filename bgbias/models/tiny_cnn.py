"""``tiny_cnn``: a three-stage CNN of about 6,000 parameters for smoke runs and tests, never for results.

It keeps the whole backbone contract, so a method or the engine runs end to end in seconds (``bgbias train
--backbone tiny_cnn --set model.pretrained=false``). With ``pretrained`` it only loads a saved
``Backbone.state_dict()`` of its own. Stages: ``stride2`` 8 ch, ``stride4`` 16, ``final`` 32 (stride 1);
input ``(x − 0.5) / 0.5``.
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from bgbias.errors import AssetError
from bgbias.models import weights as weight_files
from bgbias.models.backbone import Backbone
from bgbias.models.input_convention import SYMMETRIC
from bgbias.models.registry import register_backbone

CHANNELS = {"stride2": 8, "stride4": 16, "final": 32}
_STRIDES = {"stride2": 2, "stride4": 2, "final": 1}
_NO_WEIGHTS_FIX = "set model.pretrained=false (tiny_cnn is for smoke runs and tests: no pretrained weights)"


@register_backbone("tiny_cnn")
def build_tiny_cnn(*, pretrained: bool, weights: Path | None, home: Path | None) -> Backbone:
    """Random (Kaiming) weights from torch's generator, or with ``pretrained`` a tiny_cnn weight file."""
    blocks, previous = [], 3
    for stage, channels in CHANNELS.items():
        conv = nn.Conv2d(previous, channels, 3, stride=_STRIDES[stage], padding=1, bias=False)
        nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
        blocks.append((stage, nn.Sequential(conv, nn.BatchNorm2d(channels), nn.ReLU(inplace=True))))
        previous = channels
    levels = ("stride2", "stride4", "final")
    backbone = Backbone(blocks, channels=CHANNELS, levels=levels, convention=SYMMETRIC)
    if pretrained:
        if weights is None:
            raise AssetError("tiny_cnn has no pretrained weights", fix=_NO_WEIGHTS_FIX)
        fix = "pass a file saved from a tiny_cnn backbone's state_dict(), or " + _NO_WEIGHTS_FIX
        weight_files.load_state_file(backbone, weights, fix=fix)
    return backbone
