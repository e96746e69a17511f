"""DCML's attention net: a spatial gate, then a channel gate, on the backbone's last feature map; one copy per
environment, bias-free MLPs stacked on a leading axis, so the inference net (the *mean* of the copies'
weights) and the β term are one reduction each (docs/methods/dcml.md, *Ambiguities*, item 3).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bgbias.errors import OptionError

GateWeights = tuple[Tensor, Tensor, Tensor, Tensor]
"""(spatial in, spatial out, channel in, channel out) weight matrices of one attention net."""


def attend(
    feature_map: Tensor, weights: GateWeights, grid: tuple[int, int] | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """``(attended, spatial, channel)``: ``feature_map`` (B, C, H, W) gated by a spatial map (B, 1, H, W)
    from its channel mean, then by a channel vector (B, C, 1, 1) from the gated map's mean; gates in (0, 1).
    A map of another size than ``grid`` (the training map's) has its channel mean area-resampled to the grid
    and the gate resized back bilinearly."""
    spatial_in, spatial_out, channel_in, channel_out = weights
    b, _, h, w = feature_map.shape
    grid = grid or (h, w)
    layout = feature_map.mean(dim=1, keepdim=True)
    if grid != (h, w):
        layout = F.adaptive_avg_pool2d(layout, grid)
    spatial = torch.sigmoid(torch.relu(layout.flatten(1) @ spatial_in.T) @ spatial_out.T).view(b, 1, *grid)
    if grid != (h, w):
        spatial = F.interpolate(spatial, size=(h, w), mode="bilinear", align_corners=False)
    gated = feature_map * spatial
    pooled = gated.mean(dim=(2, 3))
    channel = torch.sigmoid(torch.relu(pooled @ channel_in.T) @ channel_out.T)[:, :, None, None]
    return gated * channel, spatial, channel


class AttentionCopies(nn.Module):
    """``copies`` attention nets for C×H×W maps (the training crop's): spatial MLP HW→HW→HW, channel MLP
    C→C/r→C, no biases."""

    def __init__(self, copies: int, channels: int, height: int, width: int, reduction: int = 2):
        super().__init__()
        if channels // reduction < 1:
            raise OptionError(f"the channel reduction {reduction} does not fit {channels} channels",
                              fix="set loss.channel_reduction between 1 and the number of channels")
        self.map_size = (height, width)
        cells, hidden = height * width, channels // reduction
        shapes = {"spatial_in": (cells, cells), "spatial_out": (cells, cells),
                  "channel_in": (hidden, channels), "channel_out": (channels, hidden)}
        for name, shape in shapes.items():
            weight = torch.empty(copies, *shape)
            for copy in weight:  # each copy initialised as its own nn.Linear would be
                nn.init.kaiming_uniform_(copy, a=math.sqrt(5))
            self.register_parameter(name, nn.Parameter(weight))

    @property
    def copies(self) -> int:
        return self.spatial_in.shape[0]

    @property
    def stacked(self) -> GateWeights:
        """The four weight matrices, each with all copies on its leading axis."""
        return self.spatial_in, self.spatial_out, self.channel_in, self.channel_out

    def weights(self, copy: int | None = None) -> GateWeights:
        """The weights of one copy, or (``None``) their mean: the inference net."""
        if copy is None:
            return tuple(w.mean(dim=0) for w in self.stacked)  # type: ignore[return-value]
        return tuple(w[copy] for w in self.stacked)  # type: ignore[return-value]

    def forward(self, feature_map: Tensor, copy: int | None = None) -> Tensor:
        """The attended map of copy ``copy``, or of the mean-weight net when ``copy`` is None."""
        return attend(feature_map, self.weights(copy), self.map_size)[0]

    def spread(self) -> Tensor:
        """The β term as the authors compute it: the mean over copies and the four matrices of
        (‖W_j − W̄‖₂ / ‖W_j‖₁)², scale-free; 0 when all copies are equal."""
        terms = []
        for stacked in self.stacked:
            deviation = (stacked - stacked.mean(dim=0, keepdim=True)).flatten(1).norm(dim=1)
            terms.append((deviation / stacked.flatten(1).abs().sum(dim=1)) ** 2)
        return torch.cat(terms).mean()
