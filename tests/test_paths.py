"""Where bgbias reads and writes by default (bgbias/paths.py): the asset cache follows the platform's
conventions unless ``$BGBIAS_HOME`` says otherwise; what commands make goes into the working folder."""

from __future__ import annotations

import sys
from pathlib import Path

import platformdirs
import pytest

from bgbias.paths import (
    backgrounds_root,
    bgbias_home,
    corrupted_root,
    data_root,
    leaves_folder,
    masks_root,
    runs_root,
)


def test_the_cache_is_the_platforms_user_cache_folder(monkeypatch):
    monkeypatch.delenv("BGBIAS_HOME", raising=False)
    assert bgbias_home() == platformdirs.user_cache_path("bgbias", appauthor=False)


@pytest.mark.skipif(sys.platform != "linux", reason="XDG is Linux's convention")
def test_on_linux_the_cache_is_xdg_cache_home_else_dot_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("BGBIAS_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert bgbias_home() == tmp_path / "home" / ".cache" / "bgbias"  # where bgbias always kept it there
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert bgbias_home() == tmp_path / "xdg" / "bgbias"


def test_bgbias_home_overrides_the_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("BGBIAS_HOME", str(tmp_path / "mine"))
    assert bgbias_home() == tmp_path / "mine"
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("BGBIAS_HOME", "~/elsewhere")
    assert bgbias_home() == tmp_path / "elsewhere"


def test_what_commands_make_goes_into_the_working_folder(monkeypatch):
    monkeypatch.delenv("BGBIAS_DATA", raising=False)
    assert [data_root(), masks_root(), backgrounds_root(), corrupted_root(), runs_root()] == [
        Path("data"), Path("masks"), Path("backgrounds"), Path("corrupted"), Path("runs")]
    monkeypatch.setenv("BGBIAS_DATA", "/datasets")
    assert data_root() == Path("/datasets")


@pytest.mark.parametrize(("relative", "reason"), [
    ("img/k00/a.jpg", None), ("a..b/c.jpg", None), ("report-dcml", None),
    ("", "empty"), (".", "empty"), ("/etc/passwd", "absolute"), ("../elsewhere", "climbs out with '..'"),
    ("img/k00/../../../x/z.jpg", "climbs out with '..'"), ("a/./../../b", "climbs out with '..'"),
])
def test_a_relative_path_from_input_leaves_its_folder_when_empty_absolute_or_climbing(relative, reason):
    assert leaves_folder(relative) == reason
