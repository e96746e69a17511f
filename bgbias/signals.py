"""SIGTERM taken like Ctrl-C.

SIGTERM is how ``kill``, ``timeout``, SLURM preemption, container stops and torchrun stop a job. Its default
action ends the process on the spot: no ``finally`` runs, so a run's ``run.json`` would say ``"running"`` for
good. Raised as :class:`Terminated`, a ``KeyboardInterrupt``, it takes the path Ctrl-C takes: the run records
``"interrupted"``, locks and temporary files are let go, and the command exits with 143 (128 + 15, as shells
report a process ended by SIGTERM; 130 after Ctrl-C).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

INTERRUPTED_STATUS = 128 + signal.SIGINT
"""Exit status after Ctrl-C (SIGINT): 130."""
TERMINATED_STATUS = 128 + signal.SIGTERM
"""Exit status after SIGTERM: 143."""


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: raised in the main thread wherever it was, as Ctrl-C raises ``KeyboardInterrupt``, so
    whatever handles an interruption handles this too."""


def _raise_terminated(signum: int, _frame: object) -> None:
    raise Terminated(f"stopped by {signal.Signals(signum).name}")


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """For the block, SIGTERM raises :class:`Terminated` instead of ending the process at once; SIGTERM's
    handling before the block is restored after it.

    Only SIGTERM's default action is replaced: a handler a program installed (or an ignored SIGTERM) is left
    as it is, and so is a thread other than the main one, where Python cannot set handlers. The CLI holds it
    for every command, and the library's long jobs (training, masks, rendering, explanations) hold it too,
    so a script that calls them gets the same records.
    """
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def interruption_status(interruption: KeyboardInterrupt) -> int:
    """The exit status a command ends with after ``interruption``: 143 after SIGTERM, 130 after Ctrl-C."""
    return TERMINATED_STATUS if isinstance(interruption, Terminated) else INTERRUPTED_STATUS


def sigterm_as_interrupt_in_worker(_worker_id: int) -> None:
    """A DataLoader ``worker_init_fn``: SIGTERM raises ``KeyboardInterrupt`` in the worker, which torch's
    worker loop takes as the sign to exit quietly, as it does on Ctrl-C. Without it a SIGTERM sent to the
    whole process group (SLURM, a shell's job control) kills the workers by the signal, and torch's
    "DataLoader worker ... killed by signal" error races the main process's own :class:`Terminated`."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
