"""The sizes a dataset's images are brought to: ``EvalGeometry`` for evaluation (and corrupted sets and
explanations), ``TrainGeometry`` for training; each layout states its defaults. Nothing heavy is imported
here, so the layouts (and the command line, which lists them) stay cheap to import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bgbias.errors import OptionError
from bgbias.options import INTERPOLATION, choices

INTERPOLATIONS = choices(INTERPOLATION)
"""How an image may be resized for evaluation (PIL's filters of those names, antialiased when shrinking, as
torchvision's ``Resize`` and timm's eval transform apply them to PIL images); the first is the default."""


@dataclass(frozen=True)
class EvalGeometry:
    """Shorter side after resizing, side of the centred square crop taken from it, and the filter that resizes
    the image (its mask is always resized bilinearly: ``bgbias.data.transforms``)."""

    resize: int
    crop: int
    interpolation: str = INTERPOLATIONS[0]

    def __post_init__(self) -> None:
        if not (0 < self.crop <= self.resize):
            raise OptionError(
                f"evaluation geometry resize={self.resize}, crop={self.crop} is impossible",
                fix="choose 0 < crop <= resize (the crop is cut from the resized image)",
            )
        if self.interpolation not in INTERPOLATIONS:
            raise OptionError(
                f"evaluation geometry interpolation={self.interpolation!r} is unknown",
                fix=f"choose one of {', '.join(INTERPOLATIONS)}",
            )

    def as_dict(self) -> dict[str, Any]:
        """What records and cache keys hold: the interpolation only where it is not the default bilinear."""
        recorded: dict[str, Any] = {"resize": self.resize, "crop": self.crop}
        if self.interpolation != INTERPOLATIONS[0]:
            recorded["interpolation"] = self.interpolation
        return recorded

    def describe(self) -> str:
        """``resize=R, crop=C`` and the interpolation where it is not the default, for messages."""
        return ", ".join(f"{key}={value}" for key, value in self.as_dict().items())


@dataclass(frozen=True)
class TrainGeometry:
    """Shorter side after resizing (``None``: keep the image's size), output square side, crop area ``scale``,
    aspect ``ratio`` range and horizontal flip probability."""

    resize: int | None
    crop: int
    scale: tuple[float, float] = (0.16, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip_p: float = 0.5

    def __post_init__(self) -> None:
        problems = []
        if self.resize is not None and self.resize < 1:
            problems.append(f"resize={self.resize} must be positive or None")
        if self.crop < 1:
            problems.append(f"crop={self.crop} must be positive")
        if not 0 < self.scale[0] <= self.scale[1] <= 1:
            problems.append(f"scale={self.scale} must satisfy 0 < low <= high <= 1")
        if not 0 < self.ratio[0] <= self.ratio[1]:
            problems.append(f"ratio={self.ratio} must satisfy 0 < low <= high")
        if not 0 <= self.flip_p <= 1:
            problems.append(f"flip_p={self.flip_p} must lie in [0, 1]")
        if problems:
            raise OptionError(
                "impossible training geometry: " + "; ".join(problems),
                fix="correct the training geometry in the configuration",
            )


PAPER_EVAL_GEOMETRY = EvalGeometry(resize=256, crop=227)
"""The paper's code's ``Resize(256)`` → ``CenterCrop(227)``."""

PAPER_TRAIN_GEOMETRY = TrainGeometry(resize=256, crop=227)
"""The paper's code's ``Resize(256)`` then ``RandomResizedCrop(227)`` and a flip: their training."""
