"""Child processes held at a chosen point, for tests of signals and of two processes on one output.

The child runs a piece of code in which ``pause()`` marks the point: it writes the marker file, then waits for
the test's go file (or for a signal).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

# The child takes Ctrl-C as a terminal's process would, whatever started the tests: a shell that runs a job in
# the background (`nohup .ci/run &`) starts it with SIGINT ignored, every child inherits that, and Python
# then never raises KeyboardInterrupt.
_CHILD = """
import signal, sys, time
from pathlib import Path
signal.signal(signal.SIGINT, signal.default_int_handler)
marker, go = Path(sys.argv[1]), Path(sys.argv[2])

def pause():
    marker.write_text("paused")
    while not go.exists():
        time.sleep(0.02)

exec(sys.argv[3])
"""


def pause_in_epoch(epoch: int) -> str:
    """Code that makes a training pause when ``epoch`` starts."""
    return f"""
from bgbias.engine.training_loop import TrainingSession
real_steps = TrainingSession.train_steps
def train_steps(session):
    if session.state.epoch == {epoch}:
        pause()
    return real_steps(session)
TrainingSession.train_steps = train_steps
"""


def cli(args: list[str]) -> str:
    """Code that runs the command line with ``args`` (exiting with its status)."""
    return f"\nfrom bgbias.cli import main\nmain({args!r}, prog_name='bgbias')\n"


def _child_environment() -> dict[str, str]:
    """One torch thread, as the tests have (tests/conftest.py): sums over threads round differently."""
    return {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}


def start_paused(tmp_path: Path, code: str) -> tuple[subprocess.Popen, Path]:
    """A child running ``code``, once it paused, and its go file. It has a session of its own, so a signal to
    its process group reaches its data-loader workers and not pytest."""
    marker, go = tmp_path / "paused", tmp_path / "go"
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(marker), str(go), code],
                             env=_child_environment(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             start_new_session=True)
    deadline = time.monotonic() + 120
    while not marker.is_file():
        if child.poll() is not None or time.monotonic() > deadline:
            child.kill()
            raise AssertionError(f"the child never paused: {child.stderr.read().decode()}")
        time.sleep(0.02)
    return child, go


def run_cli(args: list[str], prelude: str = "") -> subprocess.CompletedProcess:
    """The command line with ``args`` in a fresh child process, as a killed run's was. Trainings whose
    weights a test compares bit for bit run each in a fresh process: run inside a pytest-xdist worker that had
    run other tests first, a resumed and an uninterrupted training once ended with weights that differed in
    the last bits (all three signal cases, in one worker, in a full run of the suite), which fresh processes
    do not show. ``prelude``: code run before the command line (a patch)."""
    return subprocess.run([sys.executable, "-c", prelude + cli(args)], env=_child_environment(),
                          capture_output=True, text=True, timeout=600)
