"""Rendering corrupted sets: a manifest (:mod:`bgbias.corrupted.manifests`) replayed into images.

Replaying an entry is the evaluation geometry on image and mask, the background crop, then the shared
:func:`composite`. ``bgbias corrupt --render`` writes every image of a manifest as a PNG, and a gallery for a
person to look over. Its ledger (``render.jsonl``) names the manifest it renders, then per image the sha256 of
its photo, its mask and the PNG written (for a mixed variant, the sha256 of the digests, one per line): a
rendered image is kept on resume only while all three still hold, so a changed photo, mask or PNG is rendered
again. Reading, appending, rewriting and claiming are :mod:`bgbias.ledger`'s.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from tqdm import tqdm

from bgbias.assets.digest import sha256_file
from bgbias.bgaugment.background_crops import apply_crop
from bgbias.bgaugment.composite import composite_pixels
from bgbias.bgaugment.mask_check import saliency_masks
from bgbias.corrupted.gallery import evenly_spread, gallery_image
from bgbias.corrupted.manifest_schema import Sha256
from bgbias.corrupted.manifests import CorruptedEntry, CorruptedManifest, load_manifest
from bgbias.data.images import encoded, load_image, load_matching_mask
from bgbias.data.items import Dataset, Item, mask_source
from bgbias.data.splits import split_items
from bgbias.data.transforms import EvalGeometry, eval_transform_pair
from bgbias.errors import BusyError, DatasetError, ImageError
from bgbias.fileio import exclusive_lock, folder_lock_path, sweep_stale_temps, write_bytes_atomic
from bgbias.ledger import Ledger
from bgbias.schema import ClosedRecord, format_header
from bgbias.signals import sigterm_as_interrupt


@dataclass(frozen=True)
class RenderResult:
    """Where a corrupted set was rendered; how many images were written now or kept from an earlier run."""

    out_dir: Path
    written: int
    kept: int


LEDGER_NAME = "render.jsonl"
LEDGER_FORMAT = "bgbias-corrupted-render"


class RenderRecord(ClosedRecord):
    """What one rendered image was made from (image and mask file digests) and what was written (PNG); a
    ledger line with any other field, or without one of these, is no record (its image is rendered again)."""

    id: str
    image_sha256: Sha256
    mask_sha256: Sha256
    png_sha256: Sha256


def ledger_header(manifest_sha256: str) -> dict[str, Any]:
    """The first line: the folder renders the manifest with this digest and no other."""
    return {**format_header(LEDGER_FORMAT), "manifest_sha256": manifest_sha256}


RENDER_LEDGER: Ledger[RenderRecord] = Ledger(RenderRecord.model_dump, RenderRecord.model_validate,
                                             file_format=LEDGER_FORMAT)
"""``render.jsonl``: the header of :func:`ledger_header`, then :class:`RenderRecord` lines, canonical JSON."""


def claim_out_dir(out_dir: Path, manifest_sha256: str, force: bool) -> dict[str, RenderRecord]:
    """The records already in ``out_dir`` for this manifest (by id), ready to be appended to. A ledger of
    another manifest, or a non-empty folder without a ledger, is an ``OptionError`` unless ``force`` (a fresh
    ledger). The ledger is written before the first image, so every PNG in the folder belongs to it."""
    return RENDER_LEDGER.claim(
        Path(out_dir) / LEDGER_NAME,
        ledger_header(manifest_sha256),
        force=force,
        other=lambda _header: "the output folder holds a render of another corrupted-set manifest",
        foreign="the output folder is not empty and holds no render of a corrupted set",
        fix="pass another output folder, or start this one over (`bgbias corrupt ... --render DIR --force` "
            "renders every image again)",
    )


def render_entry(
    image: Image.Image, mask: Image.Image, background: Image.Image, entry: CorruptedEntry,
    geometry: EvalGeometry,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Image, mask and corrupted image of one entry, each ``uint8`` at the evaluation geometry's crop size."""
    image_arr, mask_arr = eval_transform_pair(image, mask, geometry)
    background_arr = apply_crop(background, entry.crop_box, entry.flip, geometry.crop)
    return image_arr, mask_arr, composite_pixels(image_arr, mask_arr, background_arr)


def load_pair(item: Item, masks_dir: Path, dataset_name: str) -> tuple[Image.Image, Image.Image]:
    """An item's image and saliency mask, which must exist and be of the same size."""
    path = mask_source(item, masks_dir)
    if isinstance(path, Path) and not path.is_file():
        raise ImageError(f"no saliency mask for image {item.id}", path=path,
                         fix=f"make the masks with: bgbias masks --dataset {dataset_name}")
    image = load_image(item.image)
    return image, load_matching_mask(path, image.size, item, dataset_name)


def render_corrupted(
    dataset: Dataset,
    manifest: CorruptedManifest,
    masks_dir: Path,
    out_dir: Path | None = None,
    force: bool = False,
    progress: bool = False,
) -> RenderResult:
    """Write the corrupted image of every entry as ``<out_dir>/<image relpath>.png`` (default ``out_dir``:
    the manifest's path without ``.json``), resuming as :func:`render_set` does."""
    masks_dir = Path(masks_dir)
    out_dir = Path(out_dir) if out_dir is not None else manifest.path.with_suffix("")
    by_id = {item.id: item for item in split_items(dataset, manifest.split, manifest.protocol, manifest.fold)}
    if manifest.dataset != dataset.name or any(entry.id not in by_id for entry in manifest.entries):
        raise DatasetError(
            f"the manifest does not describe the {dataset.name} dataset at {dataset.root}",
            path=manifest.path,
            fix="load the manifest with load_manifest() against the dataset it was made for",
        )
    items = [by_id[entry.id] for entry in manifest.entries]
    masks = saliency_masks(items, masks_dir, dataset.name)
    jobs = [RenderJob(item.id, png_target(out_dir, item), (item.image,), (mask,))
            for item, mask in zip(items, masks, strict=True)]
    decoded: dict[str, Image.Image] = {}  # one pool photo at a time: the jobs go background by background

    def pixels(index: int) -> np.ndarray:
        entry = manifest.entries[index]
        if entry.background not in decoded:
            decoded.clear()
            decoded[entry.background] = load_image(manifest.pool_dir / entry.background)
        image, mask = load_pair(items[index], masks_dir, dataset.name)
        return render_entry(image, mask, decoded[entry.background], entry, manifest.geometry)[2]

    order = sorted(range(len(items)), key=lambda index: (manifest.entries[index].background, index))
    return render_set(out_dir, manifest.sha256, jobs, pixels, order, force, progress)


@dataclass(frozen=True)
class RenderJob:
    """One image of a set to render: its id, where its PNG goes, and the image and mask files it is made from
    (more than one each where it combines images, as a mixed variant does)."""

    id: str
    target: Path
    images: tuple[Path, ...]
    masks: tuple[Path, ...]


def png_target(out_dir: Path, item: Item) -> Path:
    """Where an item's rendered PNG goes: its path inside the dataset, under ``out_dir``."""
    return out_dir.joinpath(*item.relpath.with_suffix(".png").parts)


def render_set(
    out_dir: Path,
    manifest_sha256: str,
    jobs: Sequence[RenderJob],
    pixels: Callable[[int], np.ndarray],
    order: Sequence[int] | None = None,
    force: bool = False,
    progress: bool = False,
) -> RenderResult:
    """Render ``jobs`` (``pixels(index)`` makes job ``index``'s image) into ``out_dir`` under the ledger of
    the manifest with digest ``manifest_sha256``, visiting them in ``order`` (default: as given): a job is
    kept while its ledger line still matches its files and PNG (``force``: rendered again). The folder is
    locked for the whole render, so no process sweeps or appends to what another is writing."""
    busy = BusyError(f"another process is rendering into {out_dir}", path=out_dir,
                     fix="wait for it to finish, or render into another folder")
    with sigterm_as_interrupt(), exclusive_lock(folder_lock_path(out_dir), wait=False, busy=busy):
        return _render_into(out_dir, manifest_sha256, jobs, pixels, order, force, progress)


def _render_into(
    out_dir: Path, manifest_sha256: str, jobs: Sequence[RenderJob], pixels: Callable[[int], np.ndarray],
    order: Sequence[int] | None, force: bool, progress: bool,
) -> RenderResult:
    ledger = out_dir / LEDGER_NAME
    sweep_stale_temps([*(job.target for job in jobs), ledger])
    done = claim_out_dir(out_dir, manifest_sha256, force)
    records: dict[str, RenderRecord] = {}
    written = kept = 0
    with (
        tqdm(total=len(jobs), desc=f"render {out_dir.name}", unit="img", disable=not progress) as bar,
        RENDER_LEDGER.log(ledger) as log,
    ):
        for index in order if order is not None else range(len(jobs)):
            job = jobs[index]
            # Digests are taken before the files are decoded: a file that changes in between is rendered
            # again by the next run instead of being kept under a digest it no longer has.
            image_sha256, mask_sha256 = _files_sha256(job.images), _files_sha256(job.masks)
            record = done.get(job.id)
            if record is not None and _still_holds(record, image_sha256, mask_sha256, job.target):
                kept += 1
            else:
                png = encoded(Image.fromarray(pixels(index)), format="PNG")
                write_bytes_atomic(job.target, png)
                record = RenderRecord(id=job.id, image_sha256=image_sha256, mask_sha256=mask_sha256,
                                      png_sha256=hashlib.sha256(png).hexdigest())
                log.append(record)
                written += 1
            records[job.id] = record
            bar.update()
    RENDER_LEDGER.write(ledger, [records[job.id] for job in jobs], header=ledger_header(manifest_sha256))
    return RenderResult(out_dir, written, kept)


def _still_holds(record: RenderRecord, image_sha256: str, mask_sha256: str, target: Path) -> bool:
    """Whether the PNG at ``target`` is the one ``record`` wrote, from the image and mask it names."""
    if (record.image_sha256, record.mask_sha256) != (image_sha256, mask_sha256):
        return False
    try:
        return sha256_file(target) == record.png_sha256
    except OSError:
        return False


def _files_sha256(paths: Sequence[Path]) -> str:
    """The sha256 of one image or mask file, or of the digests of several, one per line; ``ImageError``
    naming a file that cannot be read."""
    digests = []
    for path in paths:
        try:
            digests.append(sha256_file(path))
        except OSError as exc:
            raise ImageError(f"file cannot be read ({exc.strerror or exc})", path=path,
                             fix="restore the file (an image of the dataset, or its saliency mask)") from exc
    return digests[0] if len(digests) == 1 else hashlib.sha256("\n".join(digests).encode()).hexdigest()


def render_corrupted_sets(
    dataset: Dataset,
    manifest_paths: Sequence[Path],
    masks_dir: Path,
    out_dir: Path,
    backgrounds: Path | None = None,
    gallery_rows: int = 24,
    force: bool = False,
) -> tuple[list[RenderResult], Path]:
    """Render every repeat into ``out_dir/repeat-<r>/`` (``force``: every image again) and write
    ``out_dir/gallery.png`` from the first; what each repeat wrote and kept, and the gallery's path."""
    manifests = [load_manifest(Path(path), dataset, backgrounds) for path in manifest_paths]
    results = [
        render_corrupted(dataset, m, masks_dir, Path(out_dir) / m.path.stem, force=force, progress=True)
        for m in manifests
    ]
    gallery = Path(out_dir) / "gallery.png"
    sweep_stale_temps([gallery])
    return results, manifest_gallery(dataset, manifests[0], masks_dir, gallery, count=gallery_rows)


def manifest_gallery(
    dataset: Dataset,
    manifest: CorruptedManifest,
    masks_dir: Path,
    path: Path,
    count: int = 24,
    cell: int = 128,
    groups: int = 2,
) -> Path:
    """A gallery of ``count`` images spread evenly over a corrupted set (a ``CorruptedManifest``)."""
    by_id = {item.id: item for item in split_items(dataset, manifest.split, manifest.protocol, manifest.fold)}
    entries = manifest.entries
    picks = evenly_spread(len(entries), count)
    rows, captions = [], []
    for index in picks:
        entry = entries[index]
        image, mask = load_pair(by_id[entry.id], Path(masks_dir), dataset.name)
        background = load_image(manifest.pool_dir / entry.background)
        rows.append(render_entry(image, mask, background, entry, manifest.geometry))
        captions.append(f"{entry.id} | {entry.background}{' (flipped)' if entry.flip else ''}")
    write_bytes_atomic(path, encoded(gallery_image(rows, captions, cell, groups), format="PNG"))
    return path
