"""Rendering the profile's variant sets for inspection (``bgbias corrupt --variant ... --render``).

Each variant manifest is rendered like a corrupted set (:func:`bgbias.corrupted.render.render_set`: PNGs under
the image's own path, a resumable ledger, the folder locked while it is written), by the same
:class:`~bgbias.variants.variant_images.VariantImages` the evaluation embeds, so the files are the images
scored. ``variants.png`` shows a few images in every variant side by side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from bgbias.bgaugment.mask_check import saliency_masks
from bgbias.corrupted.gallery import evenly_spread, gallery_image
from bgbias.corrupted.manifests import CorruptedManifest, load_manifest
from bgbias.corrupted.render import (
    RenderJob,
    RenderResult,
    load_pair,
    png_target,
    render_corrupted_sets,
    render_entry,
    render_set,
)
from bgbias.data.images import encoded, load_image
from bgbias.data.items import Dataset
from bgbias.data.splits import split_items
from bgbias.data.transforms import eval_transform_pair
from bgbias.fileio import sweep_stale_temps, write_bytes_atomic
from bgbias.variants.variant_images import VariantImages
from bgbias.variants.variant_manifests import PAPER_SET, VariantManifest, load_variant_manifest

GALLERY_ROWS = 6


def render_sets(
    dataset: Dataset,
    made: Mapping[str, Sequence[Path]],
    masks_dir: Path,
    out_dir: Path,
    backgrounds: Path | None = None,
    force: bool = False,
) -> list[tuple[list[RenderResult], Path]]:
    """Render the sets :func:`~bgbias.variants.variant_manifests.make_sets` made into ``out_dir``: the paper's
    repeats with their ``gallery.png`` (:func:`~bgbias.corrupted.render.render_corrupted_sets`), the variants
    with ``variants.png``; what each part wrote and kept, and its gallery."""
    paper = list(made.get(PAPER_SET, []))
    others = [path for name, paths in made.items() if name != PAPER_SET for path in paths]
    rendered = []
    if paper:
        rendered.append(render_corrupted_sets(dataset, paper, masks_dir, out_dir, backgrounds, force=force))
    if others:
        rendered.append(render_variant_sets(dataset, others, masks_dir, out_dir, paper[0] if paper else None,
                                            backgrounds, force))
    return rendered


def render_variant_set(
    dataset: Dataset,
    manifest: VariantManifest,
    masks_dir: Path,
    out_dir: Path,
    force: bool = False,
    progress: bool = False,
) -> RenderResult:
    """Write every image of a variant set as ``<out_dir>/<image relpath>.png``; a re-run keeps the images
    whose files (the donor's included) and PNG are unchanged, ``force`` renders them all again."""
    items = split_items(dataset, manifest.split, manifest.protocol, manifest.fold)
    saliency_masks(items, masks_dir, dataset.name)
    images = VariantImages(items, manifest, masks_dir, dataset.name)
    jobs = [RenderJob(item.id, png_target(Path(out_dir), item), *map(tuple, images.sources(index)))
            for index, item in enumerate(items)]
    return render_set(Path(out_dir), manifest.sha256, jobs, images.pixels, force=force, progress=progress)


def render_variant_sets(
    dataset: Dataset,
    manifest_paths: Sequence[Path],
    masks_dir: Path,
    out_dir: Path,
    corrupted: Path | None = None,
    backgrounds: Path | None = None,
    force: bool = False,
) -> tuple[list[RenderResult], Path]:
    """Render every variant manifest into ``out_dir/<variant>/repeat-<r>/`` and write
    ``out_dir/variants.png``: the first repeat of each variant, after the paper's random background of the
    ``corrupted`` manifest (its first repeat; the pool in ``backgrounds``) where one is given."""
    manifests = [load_variant_manifest(Path(path), dataset) for path in manifest_paths]
    results = [
        render_variant_set(dataset, m, masks_dir, Path(out_dir) / m.variant.name / m.path.stem, force, True)
        for m in manifests
    ]
    first: dict[str, VariantManifest] = {}
    for manifest in manifests:
        first.setdefault(manifest.variant.name, manifest)
    paper = load_manifest(corrupted, dataset, backgrounds) if corrupted is not None else None
    gallery = Path(out_dir) / "variants.png"
    sweep_stale_temps([gallery])
    return results, variants_gallery(dataset, list(first.values()), masks_dir, gallery, paper)


def variants_gallery(
    dataset: Dataset,
    variants: Sequence[VariantManifest],
    masks_dir: Path,
    path: Path,
    corrupted: CorruptedManifest | None = None,
    count: int = GALLERY_ROWS,
) -> Path:
    """``count`` images spread over the split, each in one row: image | mask | (the paper's random
    background) | every variant, as the evaluation embeds them."""
    first = variants[0]
    items = split_items(dataset, first.split, first.protocol, first.fold)
    sets = [VariantImages(items, manifest, masks_dir, dataset.name) for manifest in variants]
    columns = ["image", "mask", *(["random-bg"] if corrupted else []), *(m.variant.name for m in variants)]
    rows, captions = [], []
    for index in evenly_spread(len(items), count):
        image, mask = load_pair(items[index], Path(masks_dir), dataset.name)
        row = list(eval_transform_pair(image, mask, first.geometry))
        if corrupted is not None:
            entry = corrupted.entries[index]
            row.append(render_entry(image, mask, load_image(corrupted.pool_dir / entry.background), entry,
                                    corrupted.geometry)[2])
        rows.append([*row, *(images.pixels(index) for images in sets)])
        captions.append(items[index].id)
    write_bytes_atomic(path, encoded(gallery_image(rows, captions, 96, 1, columns), format="PNG"))
    return path
