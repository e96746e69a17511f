"""Numpy files whose headers claim more than they hold are refused by name before anything is allocated."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

from bgbias.data.array_files import load_npy, load_npz
from bgbias.engine.embedding_cache import EmbeddingCache

HUGE = (12, 1 << 33)
"""A shape of 2³³ columns: 384 GiB of float32, which numpy would allocate before reading."""


def forged_npy(shape: tuple[int, ...] = HUGE, data: bytes = b"\0" * 384) -> bytes:
    """A ``.npy`` file whose header declares ``shape`` (float32) over ``data``."""
    stream = io.BytesIO()
    np.lib.format.write_array_header_1_0(stream, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return stream.getvalue() + data


def test_a_npy_header_claiming_more_than_the_file_holds_is_a_value_error_naming_the_array(tmp_path):
    path = tmp_path / "clean.npy"
    path.write_bytes(forged_npy())
    with pytest.raises(ValueError, match=r"array clean.npy declares shape \(12, 8589934592\) of float32 "
                                         r"\(412,316,860,416 bytes\), but 384 bytes follow it"):
        load_npy(path)
    path.write_bytes(forged_npy((12, 8)))
    assert load_npy(path).shape == (12, 8)


def test_a_npz_member_claiming_more_than_it_holds_is_refused_and_good_ones_read(tmp_path):
    path = tmp_path / "clean.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("ids.npy", forged_npy((0,), b""))
        archive.writestr("embeddings.npy", forged_npy())
    with pytest.raises(ValueError, match="array embeddings declares shape"):
        load_npz(path)
    np.savez(path, ids=np.array(["a", "b"]), embeddings=np.eye(2, dtype=np.float32))
    arrays = load_npz(path)
    assert sorted(arrays) == ["embeddings", "ids"] and arrays["ids"].tolist() == ["a", "b"]
    np.save(tmp_path / "objects.npy", np.array([object()]), allow_pickle=True)
    with pytest.raises(ValueError, match="holds Python objects"):
        load_npy(tmp_path / "objects.npy")


def test_a_cache_file_with_a_forged_header_is_made_again_not_a_memory_error(tmp_path):
    cache = EmbeddingCache(tmp_path)
    key = {"model": "m"}
    path = cache.save(key, {"embedding": np.eye(12, 8, dtype=np.float32)})
    assert cache.load(key)["embedding"].shape == (12, 8)
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    members["state.embedding.npy"] = forged_npy()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    assert cache.load(key) is None
