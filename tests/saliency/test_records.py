"""Record files survive kills (torn lines ignored), merge across shards, and round-trip every field."""

from __future__ import annotations

import json

import pytest

from bgbias.errors import ImageError
from bgbias.saliency.quality import Agreement
from bgbias.saliency.records import (
    MASK_LEDGER,
    MaskRecord,
    build_manifest,
    mask_maker,
    read_all_records,
    records_path,
    shown_mask_maker,
    write_manifest,
    write_records,
)
from tests.saliency.fakes import fake_info

DONE = MaskRecord(
    "a.jpg",
    ok=True,
    size=(4, 3),
    raw_min=0.0,
    raw_max=0.75,
    empty=False,
    quality=Agreement(iou=0.5, overlap=None),
    image_sha256="a" * 64,
    truth_sha256="b" * 64,
)
FAILED = MaskRecord.failure("b.jpg", ImageError("not an image", path="b.jpg", fix="replace it"))


def test_records_round_trip_through_a_file(tmp_path):
    path = tmp_path / "r.jsonl"
    log = MASK_LEDGER.log(path)
    log.append(DONE)
    log.append(FAILED)
    log.close()
    assert MASK_LEDGER.read_records(path) == {"a.jpg": DONE, "b.jpg": FAILED}


def test_a_torn_last_line_is_ignored_and_rewriting_drops_it(tmp_path):
    path = tmp_path / "r.jsonl"
    write_records(path, [FAILED, DONE])
    assert path.read_text().splitlines()[0].startswith('{"empty":false,"id":"a.jpg","image_sha256":"aaa')
    with path.open("a") as handle:
        handle.write('{"id": "c.jpg", "sta')
    assert set(MASK_LEDGER.read_records(path)) == {"a.jpg", "b.jpg"}
    write_records(path, MASK_LEDGER.read_records(path).values())
    assert path.read_text().count("\n") == 2 and path.read_text().endswith("}\n")


def test_a_later_line_wins_within_a_file(tmp_path):
    path = tmp_path / "r.jsonl"
    retried = MaskRecord("b.jpg", ok=True, size=(1, 1), image_sha256="b" * 64)
    log = MASK_LEDGER.log(path)
    log.append(FAILED)
    log.append(retried)
    log.close()
    assert MASK_LEDGER.read_records(path)["b.jpg"] == retried


def test_across_shard_files_a_mask_beats_a_failure(tmp_path):
    mask = MaskRecord("b.jpg", ok=True, size=(1, 1), image_sha256="b" * 64)
    write_records(records_path(tmp_path, (0, 1)), [mask])
    write_records(records_path(tmp_path, (1, 2)), [FAILED, DONE])
    merged = read_all_records(tmp_path)
    assert merged["b.jpg"].ok and merged["a.jpg"] == DONE


def test_an_id_that_is_not_utf8_round_trips_through_records_and_manifest(tmp_path):
    """A file name Python holds with lone surrogates (bytes that are not UTF-8) can never crash a writer."""
    odd = "caf\udce9.jpg"
    done = MaskRecord(odd, ok=True, size=(4, 3), image_sha256="c" * 64)
    failed = MaskRecord.failure("caf\udce9.png", ImageError("not an image", path=odd, fix="replace it"))
    path = records_path(tmp_path, (0, 1))
    log = MASK_LEDGER.log(path)
    log.append(done)
    log.append(failed)
    log.close()
    assert MASK_LEDGER.read_records(path) == {done.id: done, failed.id: failed}
    write_records(path, MASK_LEDGER.read_records(path).values())
    assert MASK_LEDGER.read_records(path) == {done.id: done, failed.id: failed}
    assert "\\udce9" in path.read_text(encoding="utf-8")  # a JSON escape: the file stays valid UTF-8

    manifest = build_manifest([done.id, failed.id], MASK_LEDGER.read_records(path), fake_info(), 0.5, ["r"])
    saved = json.loads(write_manifest(tmp_path, manifest).read_text(encoding="utf-8"))
    assert saved["failures"] == [{"id": failed.id, "error": "not an image", "fix": "replace it"}]


def test_mask_maker_names_the_model_backend_precision_and_provider_of_a_folder(tmp_path):
    write_manifest(tmp_path, build_manifest([], {}, fake_info("u2netp", backend="torch"), 0.5, []))
    maker = mask_maker(tmp_path)
    assert maker == {"model": "u2netp", "backend": "torch", "precision": "fp32",
                     "provider": "CPUExecutionProvider"}
    assert shown_mask_maker(maker) == "u2netp, torch fp32 on CPUExecutionProvider"


def test_mask_maker_is_none_for_a_folder_without_a_manifest(tmp_path):
    assert mask_maker(tmp_path) is None
    assert "no bgbias masks manifest" in shown_mask_maker(None)


@pytest.mark.parametrize("text", [
    "{not json",
    json.dumps({"settings": {"model": 7}}),
    json.dumps({"settings": {"model": "u2netp" * 100}}),
    json.dumps(["settings"]),
])
def test_a_damaged_manifest_gives_the_reason_instead_of_failing(tmp_path, text):
    (tmp_path / "manifest.json").write_text(text)
    maker = mask_maker(tmp_path)
    assert set(maker) == {"error"} and str(tmp_path / "manifest.json") in maker["error"]
    assert shown_mask_maker(maker).startswith("unknown: ")
