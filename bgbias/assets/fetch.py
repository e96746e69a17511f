"""Fetch assets into the cache: download (or take from the user's folder), verify, extract, swap into place.
Idempotent (a verified asset is left alone unless ``force``) and interrupt-safe: archives and members land in
temporary folders renamed only when verified; a killed fetch's leftovers (``.<name>.*.tmp``) are swept by the
next fetch of that asset.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path

from bgbias.assets.catalog import CATALOG, DEFAULT_ASSETS, AssetSpec, FileMember, Member, TreeMember
from bgbias.assets.digest import select_tree_files, sha256_file, tree_digest
from bgbias.assets.download import (
    Downloader,
    DownloadFailed,
    download_archive,
    manual_fix,
    new_download_folder,
)
from bgbias.assets.extract import copy_members, extract_members
from bgbias.assets.store import (
    AssetStatus,
    Catalog,
    apt_dir,
    check_asset,
    downloads_dir,
    install_root,
    resolve_home,
    spec_for,
    sweep_stale_temps,
    write_record,
)
from bgbias.errors import AssetError
from bgbias.fileio import atomic_dir, folder_lock


def fetch(
    names: Iterable[str] = DEFAULT_ASSETS,
    *,
    home: str | os.PathLike[str] | None = None,
    from_dir: str | os.PathLike[str] | None = None,
    force: bool = False,
    progress: bool = True,
    catalog: Catalog = CATALOG,
    download: Downloader = download_archive,
) -> list[AssetStatus]:
    """Install the named assets and return their status. ``from_dir``: take the archives (by file name,
    anywhere below it) or the final files from there. Every asset is attempted; failures raise together."""
    resolved = resolve_home(home)
    specs = [spec_for(name, catalog) for name in names]
    local = LocalFiles(Path(from_dir).expanduser()) if from_dir is not None else None
    done: list[AssetStatus] = []
    errors: list[AssetError] = []
    # Another process fetching into this home is waited for; what it installed is then found in place.
    with folder_lock(resolved):
        for spec in specs:
            try:
                done.append(fetch_one(spec, resolved, local=local, force=force, progress=progress,
                                      download=download))
            except AssetError as err:
                errors.append(err)
    if len(errors) == 1:
        raise errors[0]
    if errors:
        details = "\n".join(f"- {err.render()}" for err in errors)
        raise AssetError(f"{len(errors)} assets could not be fetched:\n{details}")
    return done


def fetch_one(spec: AssetSpec, home: Path, *, local: LocalFiles | None, force: bool, progress: bool,
              download: Downloader) -> AssetStatus:
    """Make one asset present and verified: keep a verified copy, else install it afresh."""
    sweep_stale_temps(spec, home)
    if not force:
        current = check_asset(spec, home, verify=True)
        if current.verified:
            if current.installed_at is None:
                write_record(spec, home, "found in the cache")
            return replace(check_asset(spec, home, verify=False), verified=True, action="already present")
        if current.present:
            _say(progress, f"{spec.name}: installed copy is damaged ({current.problem}); fetching it again")
    if local is not None:
        action = _install_from_local(spec, home, local, progress)
    else:
        action = _install_downloaded(spec, home, force, progress, download)
    write_record(spec, home, action)
    return replace(check_asset(spec, home, verify=False), verified=True, action=action)


def _install_downloaded(spec: AssetSpec, home: Path, force: bool, progress: bool,
                        download: Downloader) -> str:
    """Download into a temporary folder, verify, keep in ``downloads/`` until extracted, then delete it."""
    archive = downloads_dir(home) / spec.source.filename
    if force or not _is_pinned_archive(spec, archive):
        archive.unlink(missing_ok=True)
        _say(progress, f"{spec.name}: downloading {spec.source.describe()} "
                       f"({spec.archive_size / 1e6:.1f} MB)")
        folder = new_download_folder(downloads_dir(home), spec.name)
        try:
            try:
                fetched = download(spec.source, folder, apt_dir=apt_dir(home), progress=progress)
            except DownloadFailed as err:
                raise AssetError(str(err), fix=manual_fix(spec.name, spec.source)) from None
            actual = sha256_file(fetched)
            if actual != spec.archive_sha256:
                raise AssetError(
                    f"checksum mismatch for {fetched.name} downloaded as {spec.source.describe()}: "
                    f"expected sha256 {spec.archive_sha256}, got {actual}",
                    fix=f"retry with `bgbias assets fetch {spec.name} --force`; if the registry keeps "
                        f"serving another file: {manual_fix(spec.name, spec.source)}")
            os.replace(fetched, archive)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    _say(progress, f"{spec.name}: extracting {len(spec.members)} member(s) from {archive.name}")
    with _staged_install(spec, home) as stage:
        extract_members(spec, archive, stage, progress=progress)
    archive.unlink()
    return f"downloaded {spec.source.describe()}"


def _is_pinned_archive(spec: AssetSpec, path: Path) -> bool:
    """A complete, verified download left by an earlier fetch that failed later is reused."""
    size = path.stat().st_size if path.is_file() else None
    return size == spec.archive_size and sha256_file(path) == spec.archive_sha256


def _install_from_local(spec: AssetSpec, home: Path, local: LocalFiles, progress: bool) -> str:
    """Install from the archive found under the user's folder, else from its final files found there."""
    fix = "this is not the file the catalog pins (another version or a damaged copy); "
    fix += manual_fix(spec.name, spec.source)
    archive, archive_mismatches = local.find_file(spec.source.filename, spec.archive_sha256)
    if archive is not None:
        _say(progress, f"{spec.name}: extracting from {archive}")
        with _staged_install(spec, home) as stage:
            extract_members(spec, archive, stage, progress=progress)
        return f"installed from {archive}"
    located: dict[str, Path] = {}
    member_mismatches: list[tuple[Path, str]] = []
    for member in spec.members:
        path, mismatches = local.find_member(member)
        member_mismatches += mismatches
        if path is not None:
            located[member.target] = path
    if len(located) == len(spec.members):
        _say(progress, f"{spec.name}: copying {len(located)} verified file(s) from {local.root}")
        with _staged_install(spec, home) as stage:
            copy_members(spec, located, stage, fix=fix, progress=progress)
        return f"installed from files under {local.root}"
    # A wrong copy of the archive, or of a single-file asset's file, is the likely mistake: name it. (Loose
    # files of many-file assets share names such as "copyright" with other packages, so those stay quiet.)
    mismatched = archive_mismatches or (member_mismatches if len(spec.members) == 1 else [])
    if mismatched:
        path, actual = mismatched[0]
        expected = spec.archive_sha256 if path.name == spec.source.filename else spec.members[0].sha256
        raise AssetError(f"checksum mismatch for {path.name}: got sha256 {actual}, expected {expected}",
                         path=path, fix=fix)
    missing = [Path(m.source).name + ("/" if isinstance(m, TreeMember) else "") for m in spec.members
               if m.target not in located]
    shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
    raise AssetError(f"{spec.name}: neither {spec.source.filename} nor its files ({shown}) were found under "
                     f"{local.root}", path=local.root, fix=manual_fix(spec.name, spec.source))


@contextlib.contextmanager
def _staged_install(spec: AssetSpec, home: Path) -> Iterator[Path]:
    """A folder to extract into; on success its files take their places in the cache (a whole folder swapped,
    or in a shared one such as ``u2net/`` one atomic ``os.replace`` per file), on error it vanishes."""
    root = install_root(spec, home)
    if spec.owns_dir:
        with atomic_dir(root) as stage:
            yield stage
        return
    stage = new_download_folder(downloads_dir(home), spec.name)
    try:
        yield stage
        for member in spec.members:
            target = root / member.target
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(stage / member.target, target)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


class LocalFiles:
    """The user's ``--from`` folder, indexed once: files and folders by name."""

    def __init__(self, root: Path):
        if not root.is_dir():
            raise AssetError("the folder to fetch from does not exist", path=root,
                             fix="pass the folder that holds the downloaded wheels / .debs or the extracted "
                                 "files")
        self.root = root
        self.files: dict[str, list[Path]] = {}
        self.dirs: dict[str, list[Path]] = {}
        for folder, dirs, files in os.walk(root):
            for name in dirs:
                self.dirs.setdefault(name, []).append(Path(folder) / name)
            for name in files:
                self.files.setdefault(name, []).append(Path(folder) / name)

    def find_file(self, name: str, sha256: str) -> tuple[Path | None, list[tuple[Path, str]]]:
        """The first file called ``name`` with this digest, and (path, digest) of those without it."""
        mismatches = []
        for path in sorted(self.files.get(name, [])):
            actual = sha256_file(path)
            if actual == sha256:
                return path, mismatches
            mismatches.append((path, actual))
        return None, mismatches

    def find_member(self, member: Member) -> tuple[Path | None, list[tuple[Path, str]]]:
        if isinstance(member, FileMember):
            return self.find_file(Path(member.source).name, member.sha256)
        named = {*self.dirs.get(Path(member.source).name, []), *self.dirs.get(member.target, [])}
        for folder in sorted(named):
            files = select_tree_files(folder, member.suffixes)
            digests = ((rel, sha256_file(path)) for rel, path in files)
            if len(files) == member.count and tree_digest(digests) == member.sha256:
                return folder, []
        return None, []


def _say(progress: bool, message: str) -> None:
    if progress:
        print(message, file=sys.stderr, flush=True)
