"""Atomic writes and the sweep of what a killed writer left behind."""

from __future__ import annotations

from bgbias.fileio import sweep_stale_temps


def test_only_temporaries_of_the_given_files_are_swept(tmp_path):
    (tmp_path / ".x.png.ab12cd34.tmp").write_bytes(b"")
    (tmp_path / ".y.png.ab12cd34.tmp").write_bytes(b"")  # another shard's file in flight
    (tmp_path / "x.png").write_bytes(b"")
    assert sweep_stale_temps([tmp_path / "x.png", tmp_path / "missing-folder" / "z.png"]) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [".y.png.ab12cd34.tmp", "x.png"]
