"""The pure-Python .deb reader on fake packages."""

from __future__ import annotations

import sys

import pytest

from bgbias.assets.debian import ar_members, deb_files, normalise_member_path
from bgbias.errors import AssetError
from tests.assets.fakes import write_ar, write_deb

FILES = {"usr/share/pics/a.png": b"A" * 33, "usr/share/doc/pkg/copyright": b"License: GPL-2\n"}


def _read(path):
    return {name: stream.read() for name, stream in deb_files(path)}


@pytest.mark.parametrize("compression", ["xz", "gz", ""])
def test_reads_regular_files_and_skips_links_folders_and_escapes(tmp_path, compression):
    deb = write_deb(tmp_path / "pkg.deb", FILES, compression)
    assert _read(deb) == FILES  # no folder, no symlink, no ../evil.txt


def test_ar_members_handle_padding(tmp_path):
    deb = write_ar(
        tmp_path / "x.deb", [("debian-binary", b"2.0\n"), ("odd", b"abc"), ("data.tar.xz", b"xyz!")]
    )
    members = ar_members(deb)
    assert [(m.name, m.size) for m in members] == [("debian-binary", 4), ("odd", 3), ("data.tar.xz", 4)]
    raw = deb.read_bytes()
    assert raw[members[1].offset : members[1].offset + 3] == b"abc"
    assert raw[members[2].offset : members[2].offset + 4] == b"xyz!"


def test_not_a_deb(tmp_path):
    path = tmp_path / "fake.deb"
    path.write_bytes(b"PK\x03\x04 this is a zip")
    with pytest.raises(AssetError) as info:
        _read(path)
    assert info.value.path == str(path) and "dpkg-deb -x" in info.value.fix


def test_truncated_deb(tmp_path):
    deb = write_deb(tmp_path / "pkg.deb", FILES)
    cut = tmp_path / "cut.deb"
    cut.write_bytes(deb.read_bytes()[:-200])
    with pytest.raises(AssetError) as info:
        _read(cut)
    assert info.value.path == str(cut)


def test_deb_without_data(tmp_path):
    deb = write_ar(tmp_path / "x.deb", [("debian-binary", b"2.0\n")])
    with pytest.raises(AssetError, match=r"no data\.tar"):
        _read(deb)


def test_zstd_without_support_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "compression", None)
    monkeypatch.setitem(sys.modules, "zstandard", None)
    deb = write_ar(tmp_path / "new.deb", [("debian-binary", b"2.0\n"), ("data.tar.zst", b"\x28\xb5\x2f\xfd")])
    with pytest.raises(AssetError) as info:
        _read(deb)
    assert "zstd" in info.value.problem and "pip install zstandard" in info.value.fix


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("./usr/share/x.png", "usr/share/x.png"),
        ("usr//share/./x", "usr/share/x"),
        ("../etc/passwd", None),
        ("usr/../../x", None),
        ("/etc/passwd", None),
        ("./", None),
    ],
)
def test_normalise_member_path(name, expected):
    assert normalise_member_path(name) == expected
