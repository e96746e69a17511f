"""The one rembg internal bgbias reads (bgbias/saliency/sessions.py, ``rembg_onnx_session``): a session's
``inner_session``, the onnxruntime session that says which provider a predict model really runs on. rembg
does not document it, so pyproject.toml pins rembg to the series these tests pass on; a rembg that moves it
fails here, naming what to change."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from bgbias.errors import AssetError
from bgbias.saliency.sessions import CPU, REMBG_TESTED, rembg_onnx_session

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


@pytest.mark.slow
def test_the_installed_rembg_keeps_its_onnxruntime_session_where_bgbias_reads_it(rembg_u2netp):
    import rembg

    assert hasattr(rembg_u2netp, "inner_session"), (
        f"rembg {rembg.__version__} has no `inner_session` on its sessions: adapt rembg_onnx_session "
        "(bgbias/saliency/sessions.py) to this rembg, then widen the rembg pin in pyproject.toml")
    assert rembg_onnx_session(rembg_u2netp).get_providers() == [CPU]


def test_a_rembg_without_it_is_an_asset_error_naming_the_tested_releases():
    with pytest.raises(AssetError) as caught:
        rembg_onnx_session(object())
    assert "inner_session" in caught.value.problem
    assert REMBG_TESTED in caught.value.fix


def test_pyproject_pins_rembg_to_the_tested_releases():
    requirements = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["dependencies"]
    assert REMBG_TESTED in requirements
