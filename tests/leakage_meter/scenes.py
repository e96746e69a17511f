"""Generated datasets whose answer is known, for the leakage meter: tiny images of a shape on a background,
with their exact masks, and a tiny convolutional encoder fixed by its seed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from bgbias.data.table import ImageTable, image_table
from bgbias.engine.external_model import ExternalModel, external_model
from bgbias.engine.model_spec import network_from_module
from bgbias.models.model_input import ModelInput

SIDE = 48
"""Images are SIDE × SIDE pixels, and the encoder sees them at that size."""
SHAPES = ("disk", "square", "bar", "cross")
COLOURS = np.array([(200, 40, 40), (40, 170, 60), (50, 80, 210), (220, 200, 40)], np.uint8)
"""The backgrounds' colours (and the classes' where the background is the class)."""


def shape_mask(shape: str, centre: tuple[int, int]) -> np.ndarray:
    """A hard (0 or 255) mask of ``shape`` around ``centre`` (row, column)."""
    rows, columns = np.mgrid[:SIDE, :SIDE]
    dy, dx = rows - centre[0], columns - centre[1]
    inside = {
        "disk": dy**2 + dx**2 <= 9**2,
        "square": (abs(dy) <= 7) & (abs(dx) <= 7),
        "bar": (abs(dy) <= 3) & (abs(dx) <= 13),
        "cross": ((abs(dy) <= 2) & (abs(dx) <= 11)) | ((abs(dx) <= 2) & (abs(dy) <= 11)),
    }[shape]
    return np.where(inside, 255, 0).astype(np.uint8)


class Scenes(torch.utils.data.Dataset):
    """``(image, label, mask)`` samples: a shape with its exact mask on a flat background with faint noise."""

    def __init__(self, samples: list[tuple[np.ndarray, int, np.ndarray]]) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[np.ndarray, int, np.ndarray]:
        return self.samples[index]


def scenes(background: str, shape: str, *, per_class: int = 12, seed: int = 0,
           root: Path | None = None) -> ImageTable:
    """:func:`scene_samples` as a table dataset (relative paths under ``root``: it has none)."""
    return image_table(scene_samples(background, shape, per_class=per_class, seed=seed), root)


def scene_samples(background: str, shape: str, *, per_class: int = 12, seed: int = 0) -> Scenes:
    """Four classes of ``per_class`` images each. The background's colour is the class's (``"class"``),
    drawn at random (``"random"``) or the first colour for every image (``"shared"``); the shape is the
    class's (``"class"``) or drawn at random (``"random"``). The object's colour, and its place (a few pixels
    about the centre), are always random."""
    rng = np.random.default_rng(seed)
    samples = []
    for label in range(len(SHAPES)):
        for _ in range(per_class):
            colour = {"class": label, "shared": 0}.get(background)
            colour = COLOURS[rng.integers(len(COLOURS)) if colour is None else colour]
            outline = SHAPES[label if shape == "class" else rng.integers(len(SHAPES))]
            centre = (SIDE // 2 + int(rng.integers(-3, 4)), SIDE // 2 + int(rng.integers(-3, 4)))
            noise = rng.integers(-4, 5, size=(SIDE, SIDE, 3))
            image = np.clip(colour.astype(int) + noise, 0, 255).astype(np.uint8)
            mask = shape_mask(outline, centre)
            image[mask == 255] = rng.integers(0, 256, size=3)
            samples.append((image, label, mask))
    return Scenes(samples)


class TinyEncoder(nn.Module):
    """Two random convolutions, pooled to a 4 × 4 grid: colours and coarse shapes apart, nothing learned."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.layers = nn.Sequential(nn.Conv2d(3, 16, 5, stride=2), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2),
                                    nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten())

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.layers(images)


def tiny_encoder(home: Path) -> ExternalModel:
    """The tiny encoder as an outside model at SIDE × SIDE, in float32 on the CPU, its home ``home``."""
    return external_model(network_from_module(TinyEncoder(), "tiny-encoder"),
                          ModelInput(input_size=SIDE, resize=SIDE), torch.device("cpu"), home, amp="off")
