"""DCML's environment learner: per-image soft environment weights chosen adversarially (eq. 11).

With the model frozen, free logits ω (images × environments, weights ``softmax(ω_i·)``) start ~N(0, 1) and
Adam moves them to *maximise* the dummy-gradient penalties; the ω of the pass with the best mean objective is
kept. The authors' code means 5 passes but returns after the first (docs/methods/dcml.md, *Ambiguities*,
item 4): ``passes`` chooses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from bgbias.methods.base import Batch, TrainingData

Objective = Callable[["Batch", Tensor], Tensor]
"""(batch, its environment weights (B, k)) → the objective to maximise, differentiable in the weights."""

# Keys this learner's randomness apart from the training steps' (see TrainingData).
STREAM = 0xDC41


@dataclass(frozen=True)
class EnvironmentLearning:
    """What one update found: the kept logits, the mean objective of each pass and the pass kept."""

    logits: Tensor
    objectives: list[float]
    best_pass: int

    def summary(self) -> dict[str, float]:
        """Values for the epoch's metrics row: the objective of the first and the kept pass, and how
        decided the weights are (mean over images of the largest weight: 1/k uniform … 1 one-hot)."""
        weights = self.logits.softmax(dim=1)
        return {
            "env_objective_first_pass": self.objectives[0],
            "env_objective_kept": self.objectives[self.best_pass],
            "env_passes": float(len(self.objectives)),
            "env_weight_max_mean": float(weights.max(dim=1).values.mean()),
        }


def learn_environments(
    objective: Objective,
    data: TrainingData,
    *,
    epoch: int,
    environments: int,
    passes: int,
    lr: float,
    batch_size: int,
) -> EnvironmentLearning:
    """Run ``passes`` passes of Adam on −objective over ω; only ω receives gradients."""
    generator = data.generator(stream=STREAM, epoch=epoch)
    logits = torch.randn(data.num_samples, environments, generator=generator, device=data.device)
    logits.requires_grad_(True)
    optimizer = torch.optim.Adam([logits], lr=lr)
    objectives: list[float] = []
    best_pass, best = 0, logits.detach().clone()
    for pass_index in range(passes):
        total, steps = 0.0, 0
        said = f"learning DCML's environment weights, pass {pass_index + 1}/{passes}"
        for batch in data.batches(stream=STREAM, epoch=epoch, pass_index=pass_index, batch_size=batch_size,
                                  desc=said):
            value = objective(batch, logits[batch.indices].softmax(dim=1))
            # autograd.grad, not backward: the frozen model's parameters must not collect gradients.
            (logits.grad,) = torch.autograd.grad(-value, [logits])
            optimizer.step()
            total, steps = total + float(value.detach()), steps + 1
        objectives.append(total / max(steps, 1))
        if pass_index == 0 or objectives[-1] > objectives[best_pass]:
            best_pass, best = pass_index, logits.detach().clone()
    return EnvironmentLearning(best, objectives, best_pass)
