"""What long work will cost, from the pace of what is done: the lines ``bgbias train``, ``audit`` and
``study`` print before and while they work (on stderr, beside their progress, so scripted outputs stay as
they are)."""

from __future__ import annotations

ESTIMATE_AFTER = 5
"""Training batches timed before a run says what an epoch will take: the first warm up (allocations,
caches), so the estimate is rough, and it comes within seconds."""


def duration(seconds: float) -> str:
    """``1h02m``, ``3m05s``: a time as the estimates and ``bgbias study --status`` show it."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def time_left(done: int, total: int, elapsed: float) -> str:
    """``about 3m05s left for 4 more``: the rest of ``total`` at the pace of the ``done`` ones."""
    left = total - done
    return f"about {duration(elapsed / done * left)} left for {left} more" if done and left else "none left"


def epoch_estimate(seconds: float, batches: int, per_epoch: int, epochs_left: int) -> str:
    """The line a training run logs once its first ``batches`` of ``per_epoch`` took ``seconds``."""
    epoch = seconds / batches * per_epoch
    return (f"estimate: about {duration(epoch)} of training steps per epoch ({batches} of its {per_epoch} "
            f"batches took {seconds:.1f} s), about {duration(epoch * epochs_left)} for the {epochs_left} "
            f"epoch{'s' * (epochs_left != 1)} left, validation not included (early stopping may end sooner)")
