"""Record files survive kills (torn lines ignored), merge across shards, and round-trip every field."""

from __future__ import annotations

from bgbias.errors import ImageError
from bgbias.saliency.quality import Agreement
from bgbias.saliency.records import (
    MaskRecord,
    RecordLog,
    read_all_records,
    read_records,
    records_path,
    write_records,
)

DONE = MaskRecord(
    "a.jpg",
    ok=True,
    size=(4, 3),
    raw_min=0.0,
    raw_max=0.75,
    empty=False,
    quality=Agreement(iou=0.5, overlap=None),
)
FAILED = MaskRecord.failure("b.jpg", ImageError("not an image", path="b.jpg", fix="replace it"))


def test_records_round_trip_through_a_file(tmp_path):
    path = tmp_path / "r.jsonl"
    log = RecordLog(path)
    log.append(DONE)
    log.append(FAILED)
    log.close()
    assert read_records(path) == {"a.jpg": DONE, "b.jpg": FAILED}


def test_a_torn_last_line_is_ignored_and_rewriting_drops_it(tmp_path):
    path = tmp_path / "r.jsonl"
    write_records(path, [FAILED, DONE])
    assert path.read_text().splitlines()[0].startswith('{"empty":false,"id":"a.jpg"')  # id order
    with path.open("a") as handle:
        handle.write('{"id": "c.jpg", "sta')
    assert set(read_records(path)) == {"a.jpg", "b.jpg"}
    write_records(path, read_records(path).values())
    assert path.read_text().count("\n") == 2 and path.read_text().endswith("}\n")


def test_a_later_line_wins_within_a_file(tmp_path):
    path = tmp_path / "r.jsonl"
    retried = MaskRecord("b.jpg", ok=True, size=(1, 1))
    log = RecordLog(path)
    log.append(FAILED)
    log.append(retried)
    log.close()
    assert read_records(path)["b.jpg"] == retried


def test_across_shard_files_a_mask_beats_a_failure(tmp_path):
    write_records(records_path(tmp_path, (0, 1)), [MaskRecord("b.jpg", ok=True, size=(1, 1))])
    write_records(records_path(tmp_path, (1, 2)), [FAILED, DONE])
    merged = read_all_records(tmp_path)
    assert merged["b.jpg"].ok and merged["a.jpg"] == DONE
