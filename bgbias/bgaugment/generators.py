"""Where BGAugment's randomness comes from: a CPU ``torch.Generator``, the one kind that a user's code, the
training engine and DataLoader workers all share.

The crop rules draw through numpy's ``random``/``uniform``/``integers`` (the corrupted sets' manifests keep
drawing from numpy); :class:`TorchDraws` gives a torch generator the same calls. Sampling stays on the CPU: a
device generator would synchronise on each of the few dozen numbers per batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from bgbias.errors import OptionError


class TorchDraws:
    """A CPU ``torch.Generator`` behind the calls the crop rules make (numpy's names and ranges)."""

    def __init__(self, generator: torch.Generator):
        self.generator = generator

    def random(self) -> float:
        """A float in [0, 1)."""
        return float(torch.rand((), dtype=torch.float64, generator=self.generator))

    def uniform(self, low: float, high: float) -> float:
        """A float in [low, high)."""
        return low + (high - low) * self.random()

    def integers(self, low: int, high: int) -> int:
        """An integer in [low, high)."""
        return int(torch.randint(low, high, (), generator=self.generator))


def check_generator(generator: object, name: str = "generator") -> None:
    """Refuse anything but a CPU ``torch.Generator``, naming the argument as Python writes it."""
    if isinstance(generator, torch.Generator) and generator.device.type == "cpu":
        return
    given = (f"{name}= is a torch.Generator on {generator.device}" if isinstance(generator, torch.Generator)
             else f"{name}={generator!r} is invalid")
    raise OptionError(
        f"{given}: it must be a torch.Generator on the CPU (BGAugment draws its crops there, then composites "
        "on the images' device)",
        fix=f"pass {name}=torch.Generator().manual_seed(0)",
    )


def keyed_generator(key: Sequence[int]) -> torch.Generator:
    """A CPU generator seeded by a hash of ``key`` (non-negative integers, e.g. seed, epoch, step), so that a
    draw depends on its key alone, never on what was drawn before it: a resumed run repeats it exactly."""
    seed = int(np.random.SeedSequence(list(key)).generate_state(1, np.uint64)[0])
    return torch.Generator().manual_seed(seed)
