"""Concurrent ``bgbias masks`` runs on one folder, as real processes: one shard, one writer; different shards
at once; the manifest never written from a stale read of the records."""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path

import numpy as np
import pytest

from bgbias.errors import BusyError
from bgbias.saliency.pipeline import write_masks
from bgbias.saliency.records import MANIFEST_NAME, manifest_lock, read_all_records
from tests.saliency.fakes import FakeSession

SPAWN = multiprocessing.get_context("spawn")  # no fork of a process that runs threads

pytestmark = pytest.mark.slow  # every test starts a child process, which imports numpy and Pillow first
PATIENCE = 60.0
"""Seconds a test waits for a child process at most (a spawned child imports numpy and Pillow first)."""


class SlowSession(FakeSession):
    """The fake network, taking a while per image, so a run is still going when another one starts."""

    def infer(self, prepared: np.ndarray) -> np.ndarray:
        time.sleep(0.1)
        return super().infer(prepared)


def _make_masks(items, out: Path, shard: tuple[int, int], started, slow: bool) -> None:
    """A child process's run; ``started`` is set once it has logged its first record (so it holds its
    shard), or, for a fast run, just before it begins."""
    if slow:
        write_masks(items, out, SlowSession(), shard=shard, workers=1, progress=False,
                    on_record=lambda _record: started.set())
    else:
        started.set()
        write_masks(items, out, FakeSession(), shard=shard, progress=False)


def _start(items, out: Path, shard: tuple[int, int], *, slow: bool):
    started = SPAWN.Event()
    child = SPAWN.Process(target=_make_masks, args=(items, out, shard, started, slow))
    child.start()
    assert started.wait(PATIENCE), "the child run never started"
    return child


def _finish(child) -> None:
    child.join(PATIENCE)
    assert child.exitcode == 0


def test_a_second_run_of_the_same_shard_is_refused_and_the_first_completes(bench_items, tmp_path):
    out = tmp_path / "m"
    first = _start(bench_items, out, (0, 1), slow=True)
    try:
        with pytest.raises(BusyError) as caught:
            write_masks(bench_items, out, FakeSession(), progress=False)
        assert str(out) in caught.value.problem and "--out" in caught.value.fix
    finally:
        _finish(first)
    records = read_all_records(out)
    assert sorted(records) == sorted(item.id for item in bench_items) and all(r.ok for r in records.values())
    counts = json.loads((out / MANIFEST_NAME).read_text())["counts"]
    assert (counts["masks"], counts["missing"]) == (12, 0)


def test_two_shards_run_at_once_and_the_manifest_counts_both(bench_items, tmp_path):
    out = tmp_path / "m"
    other = _start(bench_items, out, (0, 2), slow=True)
    try:
        mine = write_masks(bench_items, out, FakeSession(), shard=(1, 2), progress=False)
        assert (mine.written, mine.failed) == (6, 0)
    finally:
        _finish(other)
    counts = json.loads((out / MANIFEST_NAME).read_text())["counts"]
    assert (counts["masks"], counts["missing"]) == (12, 0)


def test_no_manifest_is_written_while_another_run_holds_it(bench_items, tmp_path):
    out = tmp_path / "m"
    with manifest_lock(out):
        child = _start(bench_items, out, (1, 2), slow=False)
        child.join(2.0)  # the whole run takes well under a second once it may go on
        assert child.is_alive() and not (out / MANIFEST_NAME).exists()
    _finish(child)
    counts = json.loads((out / MANIFEST_NAME).read_text())["counts"]
    assert (counts["masks"], counts["missing"]) == (6, 6)
