"""Random-weight backbones that map different images to different points.

A randomly initialised MobileNetV2 (or GoogLeNet) with the initial BatchNorm statistics (mean 0, variance 1)
shrinks its features to ~1e-10, so every image gets the same embedding up to rounding: rankings become ties
and embedding tests would check nothing. Measuring the statistics on one batch of random images, as pretrained
weights would bring them, gives embeddings that differ.
"""

from __future__ import annotations

import torch
from torch import nn

from bgbias.methods.base import Method


def calibrate_batchnorm(method: Method, side: int = 32, seed: int = 1) -> Method:
    """Set every BatchNorm's running statistics to those of 16 random ``side``-px images; eval mode after."""
    frozen = method.backbone.freeze_batchnorm
    method.backbone.freeze_batchnorm = False
    for module in method.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.reset_running_stats()
            module.momentum = None  # a plain average: after one batch, exactly that batch's statistics
    method.train()
    with torch.no_grad():
        method.embed(torch.rand(16, 3, side, side, generator=torch.Generator().manual_seed(seed)))
    for module in method.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.momentum = 0.1
    method.backbone.freeze_batchnorm = frozen
    return method.eval()
