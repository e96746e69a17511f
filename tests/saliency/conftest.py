"""Fixtures: the real u2netp model (session-scoped, offline when a copy or its wheel is at hand), a tiny bench
replica with exact ground-truth masks, and a fast fake session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bgbias.data.items import Item
from bgbias.data.registry import open_dataset
from tests.replicas import make_bench
from tests.saliency.fakes import FakeSession
from tests.u2netp import provide_u2netp


@pytest.fixture(scope="session")
def u2netp_file(tmp_path_factory) -> Path:
    return provide_u2netp(tmp_path_factory.mktemp("bgbias-home"))


@pytest.fixture(scope="session")
def u2netp_session(u2netp_file):
    """A real bgbias onnxruntime session on u2netp, as rembg runs it (one stream: tests compare exact
    numbers)."""
    from bgbias.saliency.sessions import Inference, open_session

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("U2NET_HOME", str(u2netp_file.parent))
        return open_session("u2netp", Inference(backend="onnxruntime", device="cpu", streams=1))


@pytest.fixture(scope="session")
def u2netp_torch(u2netp_file):
    """A real bgbias torch session on u2netp, on the CPU."""
    from bgbias.saliency.sessions import Inference, open_session

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("U2NET_HOME", str(u2netp_file.parent))
        return open_session("u2netp", Inference(backend="torch", device="cpu"))


@pytest.fixture(scope="session")
def rembg_u2netp(u2netp_file):
    """rembg's own session on the same file, as users create it."""
    from bgbias.saliency.sessions import keeping_torch_threads

    with keeping_torch_threads():
        import rembg
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("U2NET_HOME", str(u2netp_file.parent))
        return rembg.new_session("u2netp", providers=["CPUExecutionProvider"])


@pytest.fixture
def bench_items(tmp_path) -> list[Item]:
    """12 images of a bench replica, each with an exact ground-truth mask."""
    root = make_bench(tmp_path / "bench", train_classes=2, val_classes=2, test_classes=2, per_class=2)
    return open_dataset("bench", root).items()


@pytest.fixture
def fake_session() -> FakeSession:
    return FakeSession()


@pytest.fixture
def no_models(tmp_path, monkeypatch) -> Iterator[None]:
    """Every place a U²-Net file is looked for is empty."""
    for name in ("U2NET_HOME", "BGBIAS_HOME", "HOME"):
        folder = tmp_path / name.lower()
        folder.mkdir()
        monkeypatch.setenv(name, str(folder))
    yield
    assert not any(os.scandir(tmp_path / "home")), "nothing may be downloaded into the home folder"
