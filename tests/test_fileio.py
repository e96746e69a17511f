"""Atomic writes and the sweep of what a killed writer left behind."""

from __future__ import annotations

import os
import time

from bgbias.fileio import sweep_stale_temps


def test_only_temporaries_of_the_given_files_are_swept(tmp_path):
    (tmp_path / ".x.png.ab12cd34.tmp").write_bytes(b"")
    (tmp_path / ".y.png.ab12cd34.tmp").write_bytes(b"")  # another shard's file in flight
    (tmp_path / "x.png").write_bytes(b"")
    assert sweep_stale_temps([tmp_path / "x.png", tmp_path / "missing-folder" / "z.png"]) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [".y.png.ab12cd34.tmp", "x.png"]


def test_temporaries_younger_than_the_age_given_are_spared(tmp_path):
    fresh, old = tmp_path / ".x.png.fresh1.tmp", tmp_path / ".x.png.old222.tmp"
    fresh.write_bytes(b"")
    old.write_bytes(b"")
    os.utime(old, (time.time() - 120, time.time() - 120))
    assert sweep_stale_temps([tmp_path / "x.png"], older_than=60) == 1
    assert [p.name for p in tmp_path.iterdir()] == [fresh.name]
