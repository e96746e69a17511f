"""``bgbias masks``: a soft saliency mask for every image of a dataset, resumable, shardable and recorded.

Worker threads read, hash, decode and shrink each image; batches go through the network on ``streams`` threads
(torch and onnxruntime release the GIL); workers stretch and write each output. Results are taken in order
through a bounded window, so memory stays flat and records come out in id order. A mask of an earlier run is
kept only when its record names the image's current bytes (and ground truth).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from PIL import Image
from tqdm import tqdm

from bgbias.data.images import encoded, load_image, read_image_bytes
from bgbias.data.items import Item, mask_path
from bgbias.errors import ImageError, OptionError, printable_path
from bgbias.fileio import sweep_stale_temps, write_bytes_atomic
from bgbias.hardware import usable_cores
from bgbias.options import DEFAULT_MASK_MODEL
from bgbias.saliency.quality import (
    QUALITY_NAME,
    QualityReport,
    compare_with_truth,
    quality_report,
    truth_digest,
    write_quality,
)
from bgbias.saliency.records import (
    MANIFEST_NAME,
    MASK_LEDGER,
    MaskRecord,
    build_manifest,
    check_settings,
    folder_settings,
    manifest_lock,
    mask_settings,
    read_all_records,
    record_files,
    records_path,
    shard_lock,
    write_manifest,
    write_records,
)
from bgbias.saliency.sessions import AMP_OF, Inference, MaskSession, open_session
from bgbias.signals import sigterm_as_interrupt

EMPTY_BELOW = 0.5
"""A u2net-family mask is flagged empty when the raw output (a foreground probability) never reaches this.
Measured on 2 × 60 Tux Paint cut-outs on photos: the maximum was ≥ 0.71 (u2netp), ≥ 0.999 (u2net); on 2 × 70
images without one it stayed below 0.5 on 57–74 %, below 0.03 on every plain one."""


FAILURES_SHOWN = 5
"""Failed images named on the terminal; the manifest lists them all."""


@dataclass(frozen=True)
class MaskRun:
    """What one call did (for the terminal and the exit code); the manifest holds the folder-wide picture."""

    out_dir: Path
    manifest: Path
    model: str
    backend: str
    provider: str
    images: int  # of this shard
    written: int
    remade: int  # of written: their image or ground truth changed since the last run
    skipped: int  # intact masks from earlier runs, of the image as it is now
    failures: tuple[MaskRecord, ...]  # unreadable images, in id order
    empty: int  # masks flagged as likely empty
    seconds: float
    quality: QualityReport | None

    @property
    def failed(self) -> int:
        return len(self.failures)

    @property
    def images_per_second(self) -> float:
        return self.written / self.seconds if self.seconds > 0 else 0.0

    def describe(self) -> str:
        """What the run did, for the terminal."""
        text = (f"{self.images} images ({self.model}, {self.backend} on {self.provider}): {self.written} "
                f"written, {self.skipped} already done, {self.failed} failed, {self.empty} flagged empty; "
                f"{self.images_per_second:.2f} images/s")
        if self.remade:
            text += (f"\n{self.remade} of the written masks were re-made: their image or ground truth had "
                     "changed since the earlier mask")
        return text

    def describe_failures(self) -> str:
        """The failed images by name (the first few, then the count) with the reason and the fix of each."""
        lines = [f"{self.failed} of {self.images} images failed and have no mask:"]
        for record in self.failures[:FAILURES_SHOWN]:
            lines.append(f"  {printable_path(record.id)}: {record.error}")
            if record.fix:
                lines.append(f"    fix: {record.fix}")
        if self.failed > FAILURES_SHOWN:
            lines.append(f"  ... and {self.failed - FAILURES_SHOWN} more")
        lines.append(f"  every failure, with its reason and fix, is listed in {self.manifest}")
        return "\n".join(lines)


Outcome = Literal["kept", "made", "remade"]
"""An image's earlier mask kept, or a record made now (``remade``: the earlier mask was of other content)."""


@dataclass(frozen=True)
class _Ready:
    item: Item
    size: tuple[int, int]
    image_sha256: str
    outcome: Outcome
    prepared: Any


OnRecord = Callable[[MaskRecord], None]


def make_masks(
    items: Sequence[Item],
    out_dir: str | os.PathLike[str],
    *,
    model: str = DEFAULT_MASK_MODEL,
    inference: Inference | None = None,
    workers: int | None = None,
    shard: tuple[int, int] = (0, 1),
    empty_below: float = EMPTY_BELOW,
    progress: bool = True,
) -> MaskRun:
    """Write the mask of every image of this ``shard`` (``(index, count)``) of ``items`` under ``out_dir``.
    An ``auto`` backend or amp goes on with those of the masks already there (:func:`continuing`); ``workers``
    decode and encode (default: all cores, at most :data:`MAX_WORKERS`); a missing model fails first."""
    check_shard(shard)
    session = open_session(model, continuing(Path(out_dir), model, inference or Inference()))
    return write_masks(items, out_dir, session, shard=shard, empty_below=empty_below, workers=workers,
                       progress=progress)


def continuing(out_dir: Path, model: str, inference: Inference) -> Inference:
    """``inference`` with an ``auto`` backend and amp set to what made ``model``'s masks already in
    ``out_dir``, so that resuming a folder never mixes in masks of another backend or precision."""
    folder = folder_settings(out_dir)
    if folder is None or folder.get("model") != model:
        return inference
    amp = AMP_OF.get(folder["precision"], inference.amp)
    return replace(inference,
                   backend=folder["backend"] if inference.backend == "auto" else inference.backend,
                   amp=amp if inference.amp == "auto" else inference.amp)


def check_shard(shard: tuple[int, int]) -> None:
    index, count = shard
    if count < 1 or not 0 <= index < count:
        raise OptionError(
            f"shard {index} of {count} does not exist",
            fix="give the shard as (index, count) with 0 <= index < count, e.g. 0 of 4 … 3 of 4",
        )


def shard_items(items: Sequence[Item], shard: tuple[int, int]) -> list[Item]:
    """Shard ``index`` of ``count``: every ``count``-th image of the id-sorted list, from ``index``."""
    check_shard(shard)
    index, count = shard
    return sorted(items, key=lambda item: item.id)[index::count]


def mask_is_intact(path: Path, size: tuple[int, int] | None) -> bool:
    """A mask counts as finished only if it decodes completely as an 8-bit greyscale image of ``size``."""
    if size is None:
        return False
    try:
        with Image.open(path) as mask:
            if mask.mode != "L" or mask.size != tuple(size):
                return False
            mask.load()
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        return False
    return True


MAX_WORKERS = 16
"""Default cap of the decode and encode threads: a GPU makes a few hundred masks a second, a worker takes
10–30 ms per image."""


def write_masks(
    items: Sequence[Item],
    out_dir: str | os.PathLike[str],
    session: MaskSession,
    *,
    shard: tuple[int, int] = (0, 1),
    empty_below: float = EMPTY_BELOW,
    workers: int | None = None,
    progress: bool = True,
    on_record: OnRecord | None = None,
) -> MaskRun:
    """``make_masks`` with an open session. The run holds its shard of ``out_dir`` (``BusyError`` if another
    process does). ``on_record`` runs on the calling thread after each record is logged; an exception it
    raises stops the run as an interruption would."""
    out_dir = Path(out_dir)
    mine = shard_items(items, shard)
    settings = mask_settings(session.info, empty_below)
    log_path = records_path(out_dir, shard)
    with sigterm_as_interrupt(), shard_lock(out_dir, shard):
        with manifest_lock(out_dir):
            check_settings(out_dir, settings)
            # The canonical form; drops a torn last line.
            write_records(log_path, MASK_LEDGER.read_records(log_path).values())
            sweep_stale_temps([out_dir / MANIFEST_NAME, out_dir / QUALITY_NAME])
            known = read_all_records(out_dir)
            _write_manifest(out_dir, items, known, session, empty_below)
        sweep_stale_temps([mask_path(item, out_dir) for item in mine] + [log_path])

        steps = _Steps(session, out_dir, known, empty_below)
        counts = {"made": 0, "remade": 0, "kept": 0, "empty": 0}
        failures: list[MaskRecord] = []
        started = time.perf_counter()
        log = MASK_LEDGER.log(log_path)
        outcomes = _run(mine, steps, workers or min(MAX_WORKERS, usable_cores()),
                        tqdm(total=len(mine), unit="img", desc=f"masks ({session.info.name})",
                             disable=not progress, smoothing=0.1))
        try:
            for record, outcome in outcomes:
                if outcome != "kept":
                    log.append(record)
                    if on_record is not None:
                        on_record(record)
                if not record.ok:
                    failures.append(record)
                    continue
                counts[outcome] += 1
                counts["empty"] += bool(record.empty)
        finally:
            outcomes.close()
            log.close()
        seconds = time.perf_counter() - started
        write_records(log_path, MASK_LEDGER.read_records(log_path).values())
        with manifest_lock(out_dir):
            known = read_all_records(out_dir)
            manifest = _write_manifest(out_dir, items, known, session, empty_below)
            report = quality_report(
                (item.id, known[item.id].quality)
                for item in sorted(items, key=lambda item: item.id)
                if item.id in known and known[item.id].quality is not None
            )
            if report is not None:
                write_quality(out_dir, report)
    info = session.info
    return MaskRun(out_dir=out_dir, manifest=manifest, model=info.name, backend=info.backend,
                   provider=info.provider, images=len(mine), written=counts["made"] + counts["remade"],
                   remade=counts["remade"], skipped=counts["kept"], failures=tuple(failures),
                   empty=counts["empty"], seconds=seconds, quality=report)


class _Steps:
    """The steps of one image: ``prepare`` and ``finish`` on worker threads, the network between them in a
    batch (:func:`_run`)."""

    def __init__(self, session: MaskSession, out_dir: Path, known: dict[str, MaskRecord], empty_below: float):
        self.session = session
        self.out_dir = out_dir
        self.known = known
        self.empty_below = empty_below

    def prepare(self, item: Item) -> _Ready | MaskRecord:
        """The earlier record to keep (the only ``ok`` record returned), a failure, or the network input; the
        file is read once, hashed and decoded from the same bytes."""
        try:
            data = read_image_bytes(item.image)
        except ImageError as err:
            return MaskRecord.failure(item.id, err)
        digest = hashlib.sha256(data).hexdigest()
        record = self.known.get(item.id)
        outcome: Outcome = "made"
        if record is not None and record.ok:
            if not self._same_sources(item, record, digest):
                outcome = "remade"
            elif mask_is_intact(mask_path(item, self.out_dir), record.size):
                return record
        try:
            image = load_image(item.image, data)
        except ImageError as err:
            return MaskRecord.failure(item.id, err)
        return _Ready(item, image.size, digest, outcome, self.session.prepare(image))

    @staticmethod
    def _same_sources(item: Item, record: MaskRecord, image_sha256: str) -> bool:
        """Whether ``record`` was made from this image content and the ground truth as it is now."""
        if record.image_sha256 != image_sha256:
            return False
        truth = item.ground_truth_mask
        if truth is None or record.quality is None:
            return truth is None and record.quality is None
        return truth_digest(truth) == record.truth_sha256

    def finish(self, ready: _Ready, raw: Any) -> MaskRecord:
        soft = self.session.finish(raw, ready.size)
        write_bytes_atomic(mask_path(ready.item, self.out_dir), encoded(soft.image, format="PNG"))
        truth = ready.item.ground_truth_mask
        quality, truth_sha256 = (None, None) if truth is None else compare_with_truth(soft.image, truth)
        empty = None if soft.raw_max is None else soft.raw_max < self.empty_below
        return MaskRecord(ready.item.id, ok=True, size=ready.size, raw_min=soft.raw_min, raw_max=soft.raw_max,
                          empty=empty, quality=quality, image_sha256=ready.image_sha256,
                          truth_sha256=truth_sha256)


def _run(
    items: Sequence[Item], steps: _Steps, workers: int, bar: Any
) -> Iterator[tuple[MaskRecord, Outcome]]:
    """Yield ``(record, outcome)`` per image in the order of ``items``. Batches are gathered in that order (a
    batch holds the same images on every run); at most ``window`` images are in flight, enough to fill every
    network stream and the batch being gathered and keep every worker busy."""
    info = steps.session.info
    window = max(2 * workers, info.batch * (info.streams + 1) + workers)
    todo = iter(items)
    preparing: deque[Future] = deque()
    slots: deque[Future] = deque()
    gathering: list[tuple[_Ready, Future]] = []
    with ThreadPoolExecutor(workers, "masks") as pool, \
            ThreadPoolExecutor(info.streams, "masks-network") as network, steps.session.running():

        def send() -> None:
            batch = list(gathering)
            gathering.clear()
            network.submit(_through_network, steps, batch, pool)

        def take_prepared() -> None:
            prepared = preparing.popleft().result()
            slot: Future = Future()
            slots.append(slot)
            if isinstance(prepared, MaskRecord):
                slot.set_result((prepared, "kept" if prepared.ok else "made"))
                return
            gathering.append((prepared, slot))
            if len(gathering) == info.batch:
                send()

        try:
            while True:
                while len(preparing) + len(slots) < window and (item := next(todo, None)) is not None:
                    preparing.append(pool.submit(steps.prepare, item))
                while preparing and preparing[0].done():
                    take_prepared()
                if slots and slots[0].done():
                    bar.update(1)
                    yield slots.popleft().result()
                elif preparing:
                    take_prepared()  # waits for the next image: the first one waiting may need its batch
                elif gathering:
                    send()
                elif slots:
                    slots[0].exception()  # waits for the network and the finish of the first one waiting
                else:
                    return
        finally:
            for future in preparing:
                future.cancel()
            bar.close()


def _through_network(steps: _Steps, batch: list[tuple[_Ready, Future]], pool: ThreadPoolExecutor) -> None:
    """Run ``batch`` through the network, then finish each image on a worker; each slot gets the image's
    ``(record, outcome)``, or the exception that stopped it."""
    try:
        raws = steps.session.infer([ready.prepared for ready, _ in batch])
    except BaseException as exc:
        for _, slot in batch:
            slot.set_exception(exc)
        raise
    for (ready, slot), raw in zip(batch, raws, strict=True):
        try:
            finishing = pool.submit(steps.finish, ready, raw)
        except RuntimeError as exc:  # the run stopped and its pool shut down
            slot.set_exception(exc)
            continue
        finishing.add_done_callback(lambda done, slot=slot, ready=ready: _settle(slot, done, ready.outcome))


def _settle(slot: Future, done: Future, outcome: Outcome) -> None:
    if done.cancelled():
        slot.cancel()
    elif done.exception() is not None:
        slot.set_exception(done.exception())
    else:
        slot.set_result((done.result(), outcome))


def _write_manifest(out_dir: Path, items: Sequence[Item], known: dict[str, MaskRecord], session: MaskSession,
                    empty_below: float) -> Path:
    ids = sorted(item.id for item in items)
    files = [path.relative_to(out_dir).as_posix() for path in record_files(out_dir)]
    return write_manifest(out_dir, build_manifest(ids, known, session.info, empty_below, files))
