"""Optional TensorBoard logging (``--set log.tensorboard=true``): every epoch's row of ``metrics.jsonl`` as
scalars in ``<run>/tensorboard/`` (the ``tensorboard`` extra; a run that asks without it stops first).

An error in the writer's thread (a full disk) surfaces at the next flush, after every row, as an
``OutputError``: the run stops as on any write it cannot make, instead of training on with a log that
silently ends. The thread's own traceback is not printed.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bgbias.engine.run_dir import is_metric_number
from bgbias.errors import OptionError
from bgbias.fileio import reporting_write_errors

FOLDER = "tensorboard"


def check_tensorboard() -> None:
    """An ``OptionError`` with the fix where the ``tensorboard`` package cannot be imported."""
    try:
        import torch.utils.tensorboard  # noqa: F401
    except ImportError:
        raise OptionError(
            "log.tensorboard=true needs the tensorboard package, which is not installed",
            fix="pip install 'bgbias[tensorboard]', or drop --set log.tensorboard=true",
        ) from None


def scalar_tag(column: str) -> str:
    """A metrics column as a TensorBoard tag: ``train_loss`` → ``train/loss``, others under ``run/``."""
    prefix, _, rest = column.partition("_")
    return f"{prefix}/{rest}" if prefix in ("train", "val") and rest else f"run/{column}"


def _quieting_writer_errors(printing: Any) -> Any:
    """``threading.excepthook`` without the writer thread's ``OSError`` (``add`` raises it again)."""

    def hook(report: Any) -> None:
        writer_thread = type(report.thread).__name__ == "_AsyncWriterThread"
        if not (writer_thread and issubclass(report.exc_type, OSError)):
            printing(report)

    hook.quiets_tensorboard = True  # type: ignore[attr-defined]
    return hook


class EpochScalars:
    """Writes epoch rows to the event files of ``run_root/tensorboard`` (a resumed run appends a new one)."""

    def __init__(self, run_root: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.folder = Path(run_root) / FOLDER
        if not getattr(threading.excepthook, "quiets_tensorboard", False):  # before the writer's first event
            threading.excepthook = _quieting_writer_errors(threading.excepthook)
        with reporting_write_errors(self.folder):
            self.writer = SummaryWriter(str(self.folder))

    def add(self, row: Mapping[str, Any]) -> None:
        """Every finite number of ``row`` at step ``row["epoch"]``, flushed: a killed run keeps its epochs."""
        with reporting_write_errors(self.folder):
            for column, value in row.items():
                if column != "epoch" and is_metric_number(value):
                    self.writer.add_scalar(scalar_tag(column), value, row["epoch"])
            self.writer.flush()

    def close(self) -> None:
        with reporting_write_errors(self.folder):
            self.writer.close()

