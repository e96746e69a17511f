"""The pipeline's batches, with the fast fake session: whole batches in item order, the same files as one
image per call (fresh, resumed, with failures), and a network error that stops the run cleanly."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

from bgbias.data.images import load_image
from bgbias.data.items import mask_path
from bgbias.saliency.records import MANIFEST_NAME, read_all_records, records_path
from tests.saliency.fakes import FakeSession, fake_info
from tests.saliency.test_pipeline import run, snapshot

RUN_TIMEOUT_S = 30
"""A run of a dozen tiny images takes well under a second; one that takes this long has hung."""


class NetworkFailure(Exception):
    """What a device error in the network looks like to the pipeline."""


class FailingSession(FakeSession):
    """A fake whose network raises on the batch that holds ``image`` (whichever stream runs it)."""

    def __init__(self, image: Path, **info):
        super().__init__(fake_info(**info))
        self.image = image
        self._poison = self.prepare(load_image(image))

    def infer(self, batch):
        if any(np.array_equal(prepared, self._poison) for prepared in batch):
            raise NetworkFailure(f"the network failed on the batch of {self.image.name}")
        return super().infer(batch)


def within_timeout(call, *args, **kwargs):
    """``call`` on a thread, its result or exception, or a failure if it has not returned in time."""
    outcome: dict = {}

    def target():
        try:
            outcome["result"] = call(*args, **kwargs)
        except BaseException as exc:  # handed to the test thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(RUN_TIMEOUT_S)
    if thread.is_alive():
        pytest.fail(f"the mask run did not return within {RUN_TIMEOUT_S} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def batched(size: int, streams: int = 2) -> FakeSession:
    return FakeSession(fake_info(batch=size, streams=streams))


def without_batch(manifest: bytes) -> dict:
    """A manifest with the one thing a batch size changes in it (its record of the batch) left out."""
    data = json.loads(manifest)
    del data["inference"]["batch"]
    return data


def assert_same_masks_and_records(batch_run: dict[str, bytes], single_run: dict[str, bytes]) -> None:
    assert batch_run.keys() == single_run.keys()
    for name in batch_run:
        if name == MANIFEST_NAME:
            assert without_batch(batch_run[name]) == without_batch(single_run[name])
        else:
            assert batch_run[name] == single_run[name], name


def sorted_ids(items) -> list[str]:
    return sorted(item.id for item in items)


def test_whole_batches_in_item_order_then_the_rest_and_the_same_files_as_one_by_one(bench_items, tmp_path):
    items = bench_items[:10]
    session, seen = batched(4), []
    result = within_timeout(run, items, tmp_path / "batched", session, on_record=lambda r: seen.append(r.id))
    assert session.batches == [4, 4, 2]
    assert seen == sorted_ids(items)
    assert (result.written, result.skipped, result.failed) == (10, 0, 0)
    run(items, tmp_path / "single", batched(1))
    assert_same_masks_and_records(snapshot(tmp_path / "batched"), snapshot(tmp_path / "single"))
    assert json.loads((tmp_path / "batched" / MANIFEST_NAME).read_text())["inference"]["batch"] == 4


def _resume_with_failures(items, out, session):
    """Every third image done by an earlier run, two images unreadable now: the second run with
    ``session``; its result and the ids ``on_record`` saw, in order."""
    run(items[::3], out, batched(1))
    seen: list[str] = []
    result = within_timeout(run, items, out, session, on_record=lambda record: seen.append(record.id))
    return result, seen


def test_a_resumed_run_with_failures_gives_the_same_order_counts_and_files_batched(bench_items, tmp_path):
    for bad in (bench_items[4], bench_items[8]):
        bad.image.write_bytes(b"\xff\xd8 this is not a JPEG")
    session = batched(4)
    batched_result, batched_seen = _resume_with_failures(bench_items, tmp_path / "batched", session)
    single_result, single_seen = _resume_with_failures(bench_items, tmp_path / "single", batched(1))

    kept = set(sorted_ids(bench_items)[::3])
    assert batched_seen == single_seen == [i for i in sorted_ids(bench_items) if i not in kept]
    counts = [(r.images, r.written, r.skipped, r.failed, [f.id for f in r.failures])
              for r in (batched_result, single_result)]
    assert counts[0] == counts[1] and counts[0][:4] == (12, 6, 4, 2)
    assert sum(session.batches) == 6 and all(size <= 4 for size in session.batches)
    assert_same_masks_and_records(snapshot(tmp_path / "batched"), snapshot(tmp_path / "single"))


@pytest.mark.parametrize("failing_batch", [0, 1, 2])
def test_a_network_error_stops_the_run_keeps_what_is_done_and_a_rerun_completes(bench_items, tmp_path,
                                                                                 failing_batch):
    out = tmp_path / "m"
    ids = sorted_ids(bench_items)
    items = {item.id: item for item in bench_items}
    poison = items[ids[4 * failing_batch]].image
    with pytest.raises(NetworkFailure, match=poison.name):
        within_timeout(run, bench_items, out, FailingSession(poison, batch=4, streams=2))
    done = read_all_records(out)
    assert sorted(done) == ids[: 4 * failing_batch]  # the batches before the failing one, in order
    assert all(mask_path(items[image_id], out).is_file() for image_id in done)
    assert records_path(out, (0, 1)).is_file()

    session = batched(4)
    result = within_timeout(run, bench_items, out, session)
    assert (result.skipped, result.written, result.failed) == (len(done), 12 - len(done), 0)
    run(bench_items, tmp_path / "whole", batched(4))
    assert snapshot(out) == snapshot(tmp_path / "whole")
