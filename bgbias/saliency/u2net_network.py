"""U²-Net and U²-Netp (Qin et al., Pattern Recognition 2020) as PyTorch modules, written from the paper:
nested U-structures of residual U-blocks (RSU-L; RSU-4F dilates instead of downsampling). Each convolution
has its batch norm folded into a bias, as rembg's ONNX files hold them (:mod:`~bgbias.saliency.onnx_weights`);
``forward`` gives only the fused saliency map the masks are made from.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


def _conv(in_channels: int, out_channels: int, dilation: int = 1) -> nn.Conv2d:
    """The 3×3 convolution of every block, padded to keep its input's size."""
    return nn.Conv2d(in_channels, out_channels, 3, padding=dilation, dilation=dilation)


def _pool(x: torch.Tensor) -> torch.Tensor:
    """Halve the size, rounding up (odd sizes keep their last row and column, as the paper's model does)."""
    return F.max_pool2d(x, 2, 2, ceil_mode=True)


def _resized_like(x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``x`` bilinearly resized to ``target``'s height and width (half-pixel centres)."""
    return F.interpolate(x, size=target.shape[2:], mode="bilinear", align_corners=False)


class ConvRelu(nn.Module):
    """A dilated 3×3 convolution (batch normalisation folded into its bias) and a ReLU."""

    def __init__(self, in_channels: int, out_channels: int, dilation: int = 1):
        super().__init__()
        self.conv = _conv(in_channels, out_channels, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.conv(x), inplace=True)


class ResidualUBlock(nn.Module):
    """RSU-L: an input convolution, then a small U-Net of ``levels`` encoder convolutions (downsampling
    between all but the last two, the last dilated by 2) and its decoder, added to the input convolution's
    output. With ``dilated_only`` (RSU-4F) nothing is downsampled: the encoder dilates by 1, 2, 4, 8."""

    def __init__(self, levels: int, in_channels: int, mid_channels: int, out_channels: int,
                 dilated_only: bool = False):
        super().__init__()
        self.dilated_only = dilated_only
        dilations = [2 ** level for level in range(levels)] if dilated_only else [1] * (levels - 1) + [2]
        self.input = ConvRelu(in_channels, out_channels)
        self.encoder = nn.ModuleList(
            ConvRelu(out_channels if level == 0 else mid_channels, mid_channels, dilation)
            for level, dilation in enumerate(dilations)
        )
        # Decoder level i joins encoder levels i and i + 1 (deepest first in the forward pass).
        self.decoder = nn.ModuleList(
            ConvRelu(2 * mid_channels, out_channels if level == 0 else mid_channels, dilations[level])
            for level in range(levels - 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        start = self.input(x)
        skips = []
        hidden = start
        last = len(self.encoder) - 1
        for level, conv in enumerate(self.encoder):
            hidden = conv(hidden)
            skips.append(hidden)
            if not self.dilated_only and level < last - 1:
                hidden = _pool(hidden)
        hidden = skips[-1]
        for level in range(last - 1, -1, -1):
            hidden = self.decoder[level](torch.cat((hidden, skips[level]), 1))
            if level > 0 and not self.dilated_only:
                hidden = _resized_like(hidden, skips[level - 1])
        return hidden + start


@dataclass(frozen=True)
class U2NetShape:
    """The channel widths of a U²-Net: (in, mid, out) of each encoder stage 1–6 and decoder stage 5–1."""

    encoder: tuple[tuple[int, int, int], ...]
    decoder: tuple[tuple[int, int, int], ...]


U2NET = U2NetShape(
    encoder=((3, 32, 64), (64, 32, 128), (128, 64, 256), (256, 128, 512), (512, 256, 512), (512, 256, 512)),
    decoder=((1024, 256, 512), (1024, 128, 256), (512, 64, 128), (256, 32, 64), (128, 16, 64)),
)
"""The full model (the paper's, 44 M parameters; rembg's ``u2net``, ``u2net_human_seg``)."""

U2NETP = U2NetShape(encoder=((3, 16, 64),) + ((64, 16, 64),) * 5, decoder=((128, 16, 64),) * 5)
"""The small model (1.1 M parameters; rembg's ``u2netp``)."""

_LEVELS = (7, 6, 5, 4, 4, 4)
"""RSU levels of encoder stages 1–6 (stages 5 and 6 are RSU-4F); decoder stage k mirrors encoder stage k."""


class U2Net(nn.Module):
    """Six RSU stages down, five up, a side output from each decoder stage and the deepest encoder stage,
    fused by a 1×1 convolution: ``forward`` maps an ImageNet-normalised ``(N, 3, H, W)`` batch to the fused
    saliency probability ``(N, 1, H, W)``."""

    def __init__(self, shape: U2NetShape):
        super().__init__()
        self.shape = shape
        self.encoder = nn.ModuleList(
            ResidualUBlock(levels, *channels, dilated_only=stage >= 4)
            for stage, (levels, channels) in enumerate(zip(_LEVELS, shape.encoder, strict=True))
        )
        self.decoder = nn.ModuleList(
            ResidualUBlock(levels, *channels, dilated_only=stage == 0)
            for stage, (levels, channels) in enumerate(zip(_LEVELS[4::-1], shape.decoder, strict=True))
        )
        side_channels = [channels[2] for channels in shape.decoder[::-1]] + [shape.encoder[-1][2]]
        self.side = nn.ModuleList(nn.Conv2d(channels, 1, 3, padding=1) for channels in side_channels)
        self.fuse = nn.Conv2d(len(side_channels), 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        hidden = x
        for stage, block in enumerate(self.encoder):
            hidden = block(hidden)
            skips.append(hidden)
            if stage < len(self.encoder) - 1:
                hidden = _pool(hidden)
        # decoded[k] is the output at encoder stage k's scale (the deepest: encoder stage 6 itself).
        decoded = [skips[-1]]
        hidden = skips[-1]
        for stage, block in enumerate(self.decoder):
            skip = skips[-2 - stage]
            hidden = block(torch.cat((_resized_like(hidden, skip), skip), 1))
            decoded.insert(0, hidden)
        top = decoded[0]
        sides = [self.side[0](top)]
        sides += [_resized_like(side(features), top) for side, features in zip(self.side[1:], decoded[1:],
                                                                                  strict=True)]
        return torch.sigmoid(self.fuse(torch.cat(sides, 1)))
