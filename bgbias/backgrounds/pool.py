"""The background pools: which source pictures go where, building ``train/`` and ``test/``, reading a pool.
Source *families* are dealt to the bench's scenes, the ``train`` pool (BGAugment, corrupted validation) and
the ``test`` pool (corrupted test sets), so no picture serves two roles; each pool mixes the paper's four
kinds. Generated images are committed; photo crops are rebuilt at set-up byte for byte.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from bgbias.assets.digest import sha256_file
from bgbias.backgrounds.crops import crop_resized, output_size, sample_aspect, sample_crop_box
from bgbias.backgrounds.generate import GeneratedSpec, render_generated, sample_generated
from bgbias.backgrounds.sources import PhotoSource, background_sources
from bgbias.data.images import IMAGE_SUFFIXES, encoded, image_files, load_image
from bgbias.errors import AssetError, DatasetError, ImageError, OptionError, RecordError, given
from bgbias.fileio import folder_lock, write_bytes_atomic, write_json_atomic
from bgbias.paths import backgrounds_root
from bgbias.schema import Record, format_header, read_record

POOL_SEED = 0
"""Seed of the default pools: their generated images are in the repository, so they are never reseeded."""

GROUPS = ("bench", "train", "test")
"""The three disjoint uses of source families."""

POOLS = ("train", "test")
"""The pools ``build_pools`` writes (the bench's share is used by ``bgbias.bench.build``)."""

KIND_SHARES = {"solid": 0.15, "gradient": 0.15, "photo": 0.45, "pattern": 0.25}
"""Share of each of the paper's four background kinds in a pool."""

GENERATED_PATTERN_SHARE = 0.5
"""Part of the abstract patterns that is generated; the rest are crops of packaged wallpapers and textures."""

GENERATED_LICENCE = "MIT"
"""Generated backgrounds are this project's own work, under the project's licence."""

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "bgbias-backgrounds"
PHOTO_JPEG_QUALITY = 92

_OWN_FILE = re.compile(r"^(gen-\d{4}\.png|photo-\d{4}\.jpg)$")


def assign_families(sources: Sequence[PhotoSource]) -> dict[str, list[PhotoSource]]:
    """Deal source families to ``bench``, ``train`` and ``test``, in the order of a hash of their names (not
    of ``sources``): photo families first, pattern families continuing the rotation."""
    members: dict[str, list[PhotoSource]] = defaultdict(list)
    for source in sources:
        members[source.family].append(source)
    by_kind: dict[str, list[str]] = {"photo": [], "pattern": []}
    for family, family_sources in members.items():
        by_kind[_family_kind(family_sources)].append(family)
    short = {kind: families for kind, families in by_kind.items() if len(families) < len(GROUPS)}
    if short:
        found = ", ".join(f"{len(by_kind[k])} {k}" for k in by_kind)
        raise AssetError(
            f"too few background source families: need at least {len(GROUPS)} photo and {len(GROUPS)} "
            f"pattern families (one per use: {', '.join(GROUPS)}), found {found}",
            path=_common_folder(sources),
            fix="install the background packages with `bgbias assets fetch`, or add more source pictures",
        )
    groups: dict[str, list[PhotoSource]] = {group: [] for group in GROUPS}
    turn = 0
    for kind in ("photo", "pattern"):
        for family in sorted(by_kind[kind], key=lambda name: hashlib.sha256(name.encode()).hexdigest()):
            groups[GROUPS[turn % len(GROUPS)]].extend(sorted(members[family], key=lambda s: s.origin))
            turn += 1
    return groups


def build_pools(
    out_dir: str | os.PathLike[str],
    sources: Sequence[PhotoSource],
    seed: int = 0,
    *,
    images_per_pool: int = 100,
    long_side: int = 640,
) -> dict[str, Any]:
    """Write ``out_dir/train/``, ``out_dir/test/`` and ``out_dir/manifest.json``; return the manifest. Same
    inputs, same bytes; a file whose entry and checksum match is kept (another zlib may compress committed
    images differently); our files the plan no longer lists are removed."""
    out_dir = Path(out_dir)
    with folder_lock(out_dir):  # another process completing the pools is waited for, then its files kept
        return _build_pools(out_dir, sources, seed, images_per_pool, long_side)


def _build_pools(
    out_dir: Path, sources: Sequence[PhotoSource], seed: int, images_per_pool: int, long_side: int
) -> dict[str, Any]:
    groups = assign_families(sources)
    try:  # an unreadable manifest just means everything is redone
        previous = _read_manifest(out_dir / MANIFEST_NAME)
    except RecordError:
        previous = {}
    counts = kind_counts(images_per_pool)
    entries: list[dict[str, Any]] = []
    for pool_index, pool in enumerate(POOLS):
        plan = _plan_pool(pool, pool_index, groups[pool], counts, seed, long_side)
        entries.extend(_write_pool(out_dir, plan, previous))
        _remove_stale(out_dir / pool, {Path(e["file"]).name for e in entries if e["pool"] == pool})
    manifest = {
        **format_header(MANIFEST_FORMAT),
        "seed": seed,
        "images_per_pool": images_per_pool,
        "long_side": long_side,
        "kind_counts": counts,
        "families": {group: sorted({s.family for s in groups[group]}) for group in GROUPS},
        "images": entries,
    }
    write_json_atomic(out_dir / MANIFEST_NAME, manifest)
    return manifest


def default_pools() -> Path:
    """``./backgrounds``, its ``train/`` and ``test/`` made first from the installed photos where missing, as
    ``bgbias assets backgrounds`` makes them (docs/datasets.md, *Background pools*)."""
    root = backgrounds_root()
    if all((root / pool).is_dir() for pool in POOLS):
        return root
    sources = background_sources()
    if not sources:
        raise AssetError(
            "the default background pools are missing here, and no background photographs are installed to "
            "make them from",
            path=root.resolve(),
            fix="run `bgbias assets fetch` (offline: add --from DIR holding the .deb archives); the pools "
                "are then made here on first use (or at once by `bgbias assets backgrounds`); or pass "
                f"{given('DIR')} (a folder of pictures, or one with train/ and test/)",
            parameter="backgrounds",
        )
    print(f"making the background pools in {root.resolve()} from the installed photos (once per working "
          "folder, as `bgbias assets backgrounds` does)", file=sys.stderr, flush=True)
    build_pools(root, sources, POOL_SEED)
    return root


def kind_counts(total: int) -> dict[str, int]:
    """Images of each kind in a pool of ``total`` (largest remainders, so 100 gives exactly 15/15/45/25)."""
    if total < len(KIND_SHARES):
        raise OptionError(
            f"a background pool needs at least {len(KIND_SHARES)} images (one per kind), not {total}",
            fix=f"ask for {len(KIND_SHARES)} or more images per pool",
        )
    exact = {kind: share * total for kind, share in KIND_SHARES.items()}
    counts = {kind: int(value) for kind, value in exact.items()}
    by_remainder = sorted(exact, key=lambda k: (counts[k] - exact[k], k))
    for kind in by_remainder[: total - sum(counts.values())]:
        counts[kind] += 1
    return counts


def list_pool(folder: str | os.PathLike[str]) -> list[Path]:
    """The image files directly inside ``folder``, sorted by name: any folder of pictures is a pool."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DatasetError(
            "background pool folder not found",
            path=folder,
            fix=f"pass {given('DIR')} (a folder of images, or one with train/ and test/), or build the "
                "default pools with `bgbias assets backgrounds`",
            parameter="backgrounds",
        )
    files = [folder / name for name in image_files(folder)]
    if not files:
        raise DatasetError(
            f"background pool folder holds no images ({', '.join(sorted(IMAGE_SUFFIXES))})",
            path=folder,
            fix="put background pictures in it, or rebuild the default pools with "
                "`bgbias assets backgrounds`",
        )
    _check_complete(folder, files)
    return files


def _check_complete(folder: Path, files: list[Path]) -> None:
    """A pool built by bgbias must hold every image its manifest lists: one used before its photographs were
    cut would silently give other backgrounds, and so other numbers."""
    manifest = folder.parent / MANIFEST_NAME
    if not manifest.is_file():
        return
    present = {path.name for path in files}
    listed = [
        entry["file"] for entry in _read_manifest(manifest).values()
        if entry["file"].split("/")[0] == folder.name
    ]
    missing = [name for name in listed if name.split("/")[-1] not in present]
    if missing:
        raise DatasetError(
            f"the background pool is incomplete: {len(missing)} of the {len(listed)} images its manifest "
            f"lists are missing (e.g. {missing[0]})",
            path=folder,
            fix="complete the pools with `bgbias assets backgrounds` (or run `bgbias study`)",
        )


def pool_folder(backgrounds: str | os.PathLike[str], pool: str) -> Path:
    """``backgrounds/<pool>`` when it exists (a folder with train/ and test/), else ``backgrounds`` itself."""
    backgrounds = Path(backgrounds)
    nested = backgrounds / pool
    return nested if nested.is_dir() else backgrounds


# --- planning -----------------------------------------------------------------------------------------------


@dataclass
class _PlannedImage:
    """One pool image before it is drawn: its manifest entry (without checksum) and how to draw it."""

    entry: dict[str, Any]
    rng: np.random.Generator
    spec: GeneratedSpec | None = None
    source: PhotoSource | None = None
    aspect: float = 1.0


def _plan_pool(
    pool: str, pool_index: int, sources: list[PhotoSource], counts: dict[str, int], seed: int, long_side: int
) -> list[_PlannedImage]:
    """Decide every image of a pool; each gets its own rng from (seed, pool, slot), independent of others."""
    generated_patterns = round(counts["pattern"] * GENERATED_PATTERN_SHARE)
    slots = (
        [("solid", True)] * counts["solid"]
        + [("gradient", True)] * counts["gradient"]
        + [("pattern", True)] * generated_patterns
        + [("photo", False)] * counts["photo"]
        + [("pattern", False)] * (counts["pattern"] - generated_patterns)
    )
    members: dict[str, list[PhotoSource]] = defaultdict(list)
    for source in sources:
        members[source.family].append(source)
    # assign_families gives every group at least one family of each kind.
    families = {kind: [members[f] for f in sorted(members) if _family_kind(members[f]) == kind]
                for kind in ("photo", "pattern")}
    used = Counter[str]()
    plan = []
    for slot, (kind, generated) in enumerate(slots):
        rng = np.random.default_rng(np.random.SeedSequence([seed, pool_index, slot]))
        if generated:
            used["gen"] += 1
            spec = sample_generated(rng, kind)  # type: ignore[arg-type]
            size = output_size(sample_aspect(rng), long_side)
            entry = {
                "file": f"{pool}/gen-{used['gen']:04d}.png",
                "pool": pool,
                "kind": kind,
                "generator": spec.generator,
                "params": spec.params,
                "size": list(size),
                "licence": GENERATED_LICENCE,
            }
            plan.append(_PlannedImage(entry, rng, spec=spec))
        else:
            kind_families = families[kind]
            family = kind_families[used[kind] % len(kind_families)]
            used[kind] += 1
            used["photo-file"] += 1
            source = family[int(rng.integers(len(family)))]
            aspect = sample_aspect(rng)
            entry = {
                "file": f"{pool}/photo-{used['photo-file']:04d}.jpg",
                "pool": pool,
                "kind": kind,
                "origin": source.origin,
                "family": source.family,
                "licence": source.licence,
                "size": list(output_size(aspect, long_side)),
            }
            plan.append(_PlannedImage(entry, rng, source=source, aspect=aspect))
    return plan


# --- drawing ------------------------------------------------------------------------------------------------


def _write_pool(out_dir: Path, plan: list[_PlannedImage], previous: dict[str, dict[str, Any]]) -> list[dict]:
    """Draw and write each planned image unless the file on disk already is it (each source photo decoded
    once); return the manifest entries."""
    # Checksum and upright size of each source, read without decoding the pixels.
    source_info = {path: (sha256_file(path), upright_size(path))
                   for path in {item.source.path for item in plan if item.source is not None}}
    for item in plan:
        if item.source is not None:
            digest, size = source_info[item.source.path]
            item.entry["source_sha256"] = digest
            item.entry["source_size"] = list(size)
            item.entry["crop_box"] = list(sample_crop_box(item.rng, size, item.aspect))
    todo = [item for item in plan if not _is_current(out_dir, item.entry, previous)]
    for item in todo:
        if item.spec is not None:
            pixels = Image.fromarray(render_generated(item.spec, tuple(item.entry["size"])))
            _write_if_changed(out_dir / item.entry["file"], pixels, format="PNG", optimize=True)
    by_source: dict[Path, list[_PlannedImage]] = defaultdict(list)
    for item in todo:
        if item.source is not None:
            by_source[item.source.path].append(item)
    for path in sorted(by_source):
        image = load_image(path)
        for item in by_source[path]:
            crop = crop_resized(image, tuple(item.entry["crop_box"]), tuple(item.entry["size"]))
            _write_if_changed(out_dir / item.entry["file"], crop, format="JPEG", quality=PHOTO_JPEG_QUALITY)
    return [dict(item.entry, sha256=sha256_file(out_dir / item.entry["file"])) for item in plan]


def _is_current(out_dir: Path, entry: dict[str, Any], previous: dict[str, dict[str, Any]]) -> bool:
    """Whether the file exists and is exactly what the previous manifest says for an identical entry."""
    old = previous.get(entry["file"])
    if old is None or {k: v for k, v in old.items() if k != "sha256"} != entry:
        return False
    path = out_dir / entry["file"]
    return path.is_file() and sha256_file(path) == old.get("sha256")


def _write_if_changed(path: Path, image: Image.Image, **options: Any) -> None:
    data = encoded(image, **options)
    if path.is_file() and sha256_file(path) == hashlib.sha256(data).hexdigest():
        return
    write_bytes_atomic(path, data)


def upright_size(path: Path) -> tuple[int, int]:
    """The size ``load_image`` will give, from the header: EXIF orientations 5–8 swap width and height."""
    try:
        with Image.open(path) as image:
            width, height = image.size
            orientation = image.getexif().get(0x0112, 1)
    except (OSError, SyntaxError, ValueError) as exc:
        raise ImageError(
            f"background source cannot be read ({exc})",
            path=path,
            fix="fetch the background packages again with `bgbias assets fetch --force`, or remove this "
                "source",
        ) from exc
    return (height, width) if orientation in (5, 6, 7, 8) else (width, height)


def _remove_stale(folder: Path, keep: set[str]) -> None:
    """Delete files named like ours (gen-NNNN.png, photo-NNNN.jpg) that the plan no longer lists."""
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        if _OWN_FILE.match(path.name) and path.name not in keep:
            path.unlink()


class PoolImage(Record):
    file: str


class PoolManifest(Record):
    """The pools' ``manifest.json`` as bgbias reads it back: its images by file (the rest rides along)."""

    images: list[PoolImage]


def _read_manifest(path: Path) -> dict[str, dict[str, Any]]:
    """The entries of the pools' manifest by file; a ``RecordError`` where it is missing or damaged, or
    states another format."""
    manifest = read_record(path, PoolManifest, what="the background pools' manifest",
                           file_format=MANIFEST_FORMAT, fix="re-run `bgbias assets backgrounds`")
    return {entry.file: entry.model_dump() for entry in manifest.images}


# --- small helpers ------------------------------------------------------------------------------------------


def _family_kind(family_sources: list[PhotoSource]) -> str:
    """A family is a photo family when most of its members are photos (ties count as photos)."""
    photos = sum(source.kind == "photo" for source in family_sources)
    return "photo" if 2 * photos >= len(family_sources) else "pattern"


def _common_folder(sources: Sequence[PhotoSource]) -> Path | None:
    if not sources:
        return None
    try:
        return Path(os.path.commonpath([Path(s.path).parent for s in sources]))
    except ValueError:  # sources on different drives
        return None
