"""The finite-loss check of training, without a device synchronisation per step.

Reading a CUDA tensor on the host waits for every queued kernel, so :class:`LossWatch` keeps the first
non-finite loss on the device and reads it every ``every`` steps and at the end of each epoch, before
anything of the epoch is validated or saved; the error names the step where the loss first diverged.
"""

from __future__ import annotations

import torch

from bgbias.errors import BgbiasError

CHECK_EVERY = 25
"""Optimiser steps between two reads of the watch on the host: one wait for the device per 25 steps."""


class TrainingDiverged(BgbiasError):
    """The loss became NaN or infinite."""


class LossWatch:
    """Remembers the first non-finite loss of an epoch on the device; :meth:`check` raises it."""

    def __init__(self, every: int = CHECK_EVERY):
        if every < 1:
            raise ValueError(f"every must be at least 1, got {every}")
        self.every = every
        self._epoch = 0
        self._seen = 0
        self._step: torch.Tensor | None = None
        self._value: torch.Tensor | None = None

    def see(self, loss: torch.Tensor, epoch: int, step: int) -> None:
        """Note ``loss`` (a scalar) of ``step``; every ``every``-th call reads the watch (:meth:`check`)."""
        loss = loss.detach().float()
        if self._step is None or epoch != self._epoch:
            self.check()
            self._epoch = epoch
            self._step = torch.full((), -1, dtype=torch.long, device=loss.device)
            self._value = torch.zeros((), device=loss.device)
        first = ~torch.isfinite(loss) & (self._step < 0)
        self._step = torch.where(first, step, self._step)
        self._value = torch.where(first, loss, self._value)
        self._seen += 1
        if self._seen % self.every == 0:
            self.check()

    def check(self) -> None:
        """Raise :class:`TrainingDiverged` if a loss seen was NaN or infinite (waits for the device)."""
        if self._step is None or int(self._step) < 0:
            return
        raise TrainingDiverged(
            f"the loss became {float(self._value)} at epoch {self._epoch}, step {int(self._step)}",
            fix="lower the learning rates (--set optim.lr_head=...), or clip gradients "
                "(--set optim.grad_clip=1.0)",
        )
