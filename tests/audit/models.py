"""Tiny factories for the audit's tests (``tests.audit.models:<name>``): seeded random CNNs that count the
images they embed, and a factory that fails."""

from __future__ import annotations

from collections import Counter

import torch
from torch import nn

EMBEDDED: Counter[int] = Counter()
"""Images embedded so far, by the factory's seed: what a resumed audit must not add to."""


class Counting(nn.Module):
    """A small CNN of fixed random weights, images → (B, 8), counting what it embeds."""

    def __init__(self, seed: int):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.seed = seed
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2), nn.ReLU(), nn.Conv2d(8, 16, 3, stride=2),
                                  nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 8))
        with torch.no_grad():
            for parameter in self.body.parameters():
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        EMBEDDED[self.seed] += len(images)
        return self.body(images)


def tiny(seed: int = 0) -> nn.Module:
    """The same weights for the same ``seed`` on every call."""
    return Counting(seed)


def broken() -> nn.Module:
    raise RuntimeError("this factory cannot build its model")
