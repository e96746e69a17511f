"""background_sources: the background images the installed assets provide, with their provenance."""

from __future__ import annotations

import pytest

from bgbias.assets.fetch import fetch
from bgbias.backgrounds.sources import background_sources
from tests.assets.fakes import WALLS, FakeDownloader, build_registry


@pytest.fixture
def registry(tmp_path):
    return build_registry(tmp_path / "registry")


def test_background_sources_lists_installed_backgrounds_with_provenance(registry, tmp_path):
    home = tmp_path / "home"
    assert background_sources(home, catalog=registry.catalog) == []
    fetch(["walls"], home=home, progress=False, catalog=registry.catalog, download=FakeDownloader(registry))
    sources = background_sources(home, catalog=registry.catalog)
    assert [s.path for s in sources] == [home / "assets" / "walls" / "pics" / name for name in WALLS]
    assert all(s.path.is_file() for s in sources)
    photo, light, dark = sources
    assert photo.origin == "deb:fake-walls=2.0-1:usr/share/backgrounds/photo.jpg"
    assert (photo.kind, photo.licence, photo.family) == ("photo", "CC0-1.0", "walls:photo")
    assert light.kind == "pattern" and light.family == dark.family == "walls:pattern"
