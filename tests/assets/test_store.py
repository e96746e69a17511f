"""The cache lookups: status, asset_dir and u2net_model_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from bgbias.assets.fetch import fetch
from bgbias.assets.store import asset_dir, status, u2net_model_path
from bgbias.errors import AssetError
from tests.assets.fakes import FakeDownloader, build_registry


@pytest.fixture
def registry(tmp_path):
    return build_registry(tmp_path / "registry")


def test_status_of_an_empty_cache(registry, tmp_path):
    rows = status(tmp_path / "home", verify=True, catalog=registry.catalog)
    assert [(r.name, r.present, r.verified) for r in rows] == [
        (n, False, False) for n in ("model", "stamps", "walls")
    ]
    assert all(r.problem.startswith("missing ") for r in rows)
    assert rows[1].licence == "GPL-2.0-only" and rows[1].source == "deb:fake-stamps=1.0-1"


def test_status_without_verify_checks_sizes_only(registry, tmp_path):
    home = tmp_path / "home"
    fetch(["model"], home=home, progress=False, catalog=registry.catalog, download=FakeDownloader(registry))
    (model,) = [r for r in status(home, catalog=registry.catalog) if r.name == "model"]
    assert model.present and model.verified is None and model.installed_at is not None
    (home / "u2net" / "model.onnx").write_bytes(b"short")
    (model,) = [r for r in status(home, catalog=registry.catalog) if r.name == "model"]
    assert not model.present and "bytes, expected" in model.problem


def test_asset_dir_of_a_missing_asset_names_the_fetch_command(registry, tmp_path):
    with pytest.raises(AssetError) as info:
        asset_dir("stamps", tmp_path / "home", catalog=registry.catalog)
    assert "bgbias assets fetch stamps" in info.value.fix
    assert info.value.path == str(tmp_path / "home" / "assets" / "stamps")


def test_asset_dir_of_an_installed_asset(registry, tmp_path):
    home = tmp_path / "home"
    fetch(["stamps"], home=home, progress=False, catalog=registry.catalog, download=FakeDownloader(registry))
    assert asset_dir("stamps", home, catalog=registry.catalog) == home / "assets" / "stamps"


def test_asset_dir_uses_bgbias_home_by_default(registry, tmp_path, monkeypatch):
    monkeypatch.setenv("BGBIAS_HOME", str(tmp_path / "envhome"))
    fetch(["walls"], progress=False, catalog=registry.catalog, download=FakeDownloader(registry))
    assert asset_dir("walls", catalog=registry.catalog) == tmp_path / "envhome" / "assets" / "walls"


@pytest.fixture
def model_places(tmp_path, monkeypatch):
    """Three candidate places for u2netp.onnx: $U2NET_HOME, the bgbias cache and ~/.u2net."""
    places = {
        "env": tmp_path / "u2net_home",
        "cache": tmp_path / "bghome" / "u2net",
        "user": tmp_path / "user" / ".u2net",
    }
    monkeypatch.setenv("U2NET_HOME", str(places["env"]))
    monkeypatch.setenv("BGBIAS_HOME", str(tmp_path / "bghome"))
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: tmp_path / "user"))
    for folder in places.values():
        folder.mkdir(parents=True)
        (folder / "u2netp.onnx").write_bytes(b"model")
    return places


def test_u2net_model_path_search_order(model_places):
    for place in ("env", "cache", "user"):
        assert u2net_model_path("u2netp") == model_places[place] / "u2netp.onnx"
        (model_places[place] / "u2netp.onnx").unlink()
    with pytest.raises(AssetError) as info:
        u2net_model_path("u2netp")
    err = info.value
    assert all(str(folder) in err.problem for folder in model_places.values())
    assert "bgbias assets fetch u2netp" in err.fix and "$U2NET_HOME" in err.fix


def test_u2net_model_path_without_u2net_home(model_places, monkeypatch):
    monkeypatch.delenv("U2NET_HOME")
    assert u2net_model_path() == model_places["cache"] / "u2netp.onnx"


def test_u2net_model_path_for_a_model_we_do_not_ship(model_places):
    with pytest.raises(AssetError) as info:
        u2net_model_path("isnet-general-use")
    assert "bgbias assets fetch" not in info.value.fix
    assert "isnet-general-use.onnx in $U2NET_HOME" in info.value.fix
