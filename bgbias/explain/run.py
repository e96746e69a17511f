"""Score how much of a model's attribution falls on the object, image by image (the paper's Table 2).

For each item: its eval crop and soft mask (the dataset's ground-truth mask where it ships one, else the
U²-Net saliency mask), an attribution map of the crop, and the foreground score of the map against the mask.
The output folder holds::

    records.jsonl   the ledger: settings, then one line per image (resume reads it)
    scores.csv      id, label, mask_source, foreground_fraction, attribution_on_foreground, score
    summary.json    settings (the dataset's folder too), counts, mean / std / median of the defined scores
    gallery.png     image | mask | overlay rows for images spread evenly over the items
    maps/           the gallery images' maps as 8-bit PNGs, mirroring the image paths

Every image's noise comes from a generator seeded by (seed, image id), so maps do not depend on the batch
size, on resuming, or on which other images are scored.

An attribution that explains each image against a reference image (``needs_references``, SAM's similarity
attention) gets each image's nearest classmate in the whole split (``bgbias.explain.references``); then
``scores.csv`` and the ledger lines also name the reference and its label, the settings the rule and the
reference images, the gallery adds the reference and its map of the pair, and ``reference-maps/`` keeps those
maps under the explained image's name.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import hashlib
import io
import itertools
import os
import shutil
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired

import numpy as np
from PIL import Image
from typing_extensions import TypedDict

from bgbias.augment.gallery import evenly_spread
from bgbias.augment.manifests import ids_sha256
from bgbias.augment.mask_check import saliency_masks
from bgbias.data.eval_images import EvalImages
from bgbias.data.images import load_image, load_mask, load_matching_mask
from bgbias.data.items import Item, mask_path
from bgbias.data.layout import describe_paths, missing_files
from bgbias.data.transforms import EvalGeometry, eval_transform, eval_transform_pair
from bgbias.engine.request import MeasureRequest, measured_geometry, requested_split
from bgbias.errors import BusyError, DatasetError, ImageError, OptionError
from bgbias.explain.foreground_score import attribution_on_foreground, foreground_fraction, foreground_score
from bgbias.explain.heatmap import attribution_gallery, overlay
from bgbias.explain.records import (
    EXPLAIN_AGAIN,
    GROUND_TRUTH,
    MASK_SOURCES,
    RECORDS_NAME,
    SALIENCY,
    SCORE_LEDGER,
    ImageScore,
    claim_out_dir,
    normalised_settings,
    write_ledger,
)
from bgbias.explain.references import check_reference_pool, pick_references, reference_rule
from bgbias.fileio import (
    exclusive_lock,
    folder_lock_path,
    write_bytes_atomic,
    write_json_atomic,
    write_text_atomic,
)
from bgbias.installation import InstallationRecord, installation
from bgbias.methods.attribution import (
    DEFAULT_ATTRIBUTION,
    Attribution,
    attribution_label,
    build_attribution,
    check_supported,
    needs_references,
)
from bgbias.methods.embedding_model import claim_home
from bgbias.schema import read_record
from bgbias.signals import sigterm_as_interrupt

if TYPE_CHECKING:
    import torch

    from bgbias.methods.embedding_model import EmbeddingModel

EXPLAIN_FOLDER = "explain"
SCORES_CSV = "scores.csv"
SUMMARY_JSON = "summary.json"
GALLERY_PNG = "gallery.png"
MAPS_DIR = "maps"
REFERENCE_MAPS_DIR = "reference-maps"
CSV_COLUMNS = ("id", "label", "mask_source", "foreground_fraction", "attribution_on_foreground", "score")
REFERENCE_COLUMNS = ("reference", "reference_label")
"""The columns ``scores.csv`` adds for an attribution with reference images."""
SETTINGS_FORMAT = 1


class ExplainSummary(TypedDict):
    """``summary.json`` as tables and galleries read it back (:mod:`bgbias.schema`)."""

    dataset: str
    dataset_root: NotRequired[str]
    attribution: str
    geometry: dict[str, int]
    images: int
    scored: int
    mean: float | None
    std: float | None
    installation: NotRequired[InstallationRecord]  # summaries from before bgbias recorded it lack it


@dataclass(frozen=True)
class ExplainResult:
    """Where the results went, and the summary that ``summary.json`` holds."""

    out_dir: Path
    summary: dict[str, Any]
    scores_csv: Path
    gallery: Path | None


@dataclass(frozen=True)
class MaskFile:
    """The mask an item is scored against, and where it comes from (``ground_truth`` or ``saliency``)."""

    path: Path
    source: str


def _holding_out_dir(out_dir: Path) -> contextlib.AbstractContextManager[None]:
    """Hold ``out_dir``'s lock while it is written (a ``BusyError`` at once when another process holds it: it
    would sweep, append to and rewrite what that one writes)."""
    busy = BusyError(f"another process is explaining into {out_dir}", path=out_dir,
                     fix="wait for it to finish, or explain with other settings (another folder)")
    return exclusive_lock(folder_lock_path(out_dir), wait=False, busy=busy)


def _sigterm_as_interrupt(explain_into: Callable[..., ExplainResult]) -> Callable[..., ExplainResult]:
    """``explain_into`` with SIGTERM taken like Ctrl-C (bgbias.signals)."""

    @functools.wraps(explain_into)
    def taking_sigterm(*args: Any, **options: Any) -> ExplainResult:
        with sigterm_as_interrupt():
            return explain_into(*args, **options)

    return taking_sigterm


@_sigterm_as_interrupt
def explain_items(
    model: EmbeddingModel,
    items: Sequence[Item],
    geometry: EvalGeometry,
    *,
    masks_dir: Path,
    dataset_name: str,
    out_dir: Path,
    attribution: str = DEFAULT_ATTRIBUTION,
    options: dict[str, Any] | None = None,
    device: torch.device | str,
    seed: int = 0,
    batch_size: int = 2,
    gallery_count: int = 16,
    progress: bool = False,
    force: bool = False,
    reference_items: Sequence[Item] | None = None,
    dataset_root: Path | None = None,
    log: Callable[[str], None] = print,
) -> ExplainResult:
    """Attribution maps and foreground scores of ``items`` with ``model`` (already on ``device``).

    Resumes the results of an interrupted run with the same settings in ``out_dir``; results of other
    settings there are an ``OptionError`` unless ``force``, which starts over. An attribution that does not
    support ``model``, and missing masks, fail before any work. ``gallery_count = 0`` writes no gallery.
    For an attribution that ``needs_references``, ``reference_items`` (default: ``items``; it must hold them)
    are the images each item's reference is picked from; their state comes from the model's evaluation
    cache where it fits (``log`` says whether it did). ``dataset_root``, the dataset's folder, goes into
    ``summary.json``, so that a gallery made later (``bgbias report``) opens the images that were explained.
    """
    import torch
    from tqdm import tqdm

    items = list(items)
    _check_request(items, batch_size, gallery_count, seed)
    attributor = build_attribution(attribution, **(options or {}))
    check_supported(attribution, attributor, model)
    referenced = needs_references(attributor)
    pool = list(reference_items) if reference_items is not None else items
    if referenced:
        check_reference_pool(items, pool)
    masks = mask_files(items, Path(masks_dir), dataset_name)
    device = torch.device(device)
    out_dir = Path(out_dir)
    settings = {
        "format": SETTINGS_FORMAT,
        "dataset": dataset_name,
        "attribution": attribution,
        "options": attributor.options(),
        "seed": seed,
        "geometry": geometry.as_dict(),
        "items_sha256": ids_sha256(items),
        "model_sha256": model.fingerprint(),
        "masks_dir": _saliency_dir(masks, Path(masks_dir)),
    }
    if referenced:
        settings.update(references=reference_rule(model), reference_items_sha256=ids_sha256(pool))
    settings = normalised_settings(settings)
    # One image through the model as attributions run it, with gradients, before anything is written: a model
    # that cannot run leaves no folder, and an external model's home becomes its own (model.json) only now.
    probe = EvalImages(items[:1], geometry)[0]["image"][None].to(device).float().div_(255)
    model.eval()
    with torch.enable_grad():
        model.embed(probe.requires_grad_(True))
    claim_home(model)
    # The folder's lock only now: a model that failed the probe leaves no folder, not even a lock's.
    with _holding_out_dir(out_dir):
        if force:
            shutil.rmtree(out_dir / MAPS_DIR, ignore_errors=True)
            shutil.rmtree(out_dir / REFERENCE_MAPS_DIR, ignore_errors=True)
        done = claim_out_dir(out_dir, settings, force)
        picks = evenly_spread(len(items), gallery_count)
        picked = set(picks)
        todo = [index for index, item in enumerate(items) if item.id not in done]
        # Batches keep their place in the item list: a resumed run sees the batches an uninterrupted one did.
        batches = [list(group) for _, group in itertools.groupby(todo, key=lambda index: index // batch_size)]
        references: dict[str, Item] | None = None
        if referenced:
            by_id = {item.id: item for item in pool}
            references = {score.id: by_id[score.reference] for score in done.values() if score.reference}
            references.update(pick_references(model, pool, [items[i] for i in todo], geometry, dataset_name,
                                              progress=progress, log=log))
        step = _Step(model, attributor, items, masks, geometry, dataset_name, device, seed, references)
        with SCORE_LEDGER.log(out_dir / RECORDS_NAME) as ledger, tqdm(
            total=len(items), initial=len(items) - len(todo), desc="explain", unit="img", disable=not progress
        ) as bar:
            for batch in batches:
                for index, (_image, _mask, attribution_map, score) in zip(batch, step(batch), strict=True):
                    if index in picked:
                        save_map(map_path(items[index], out_dir), attribution_map)
                        if referenced:
                            save_map(reference_map_path(items[index], out_dir), step.reference_map(index))
                    ledger.append(score)
                    done[score.id] = score
                bar.update(len(batch))

        scores = [done[item.id] for item in items]
        write_ledger(out_dir / RECORDS_NAME, settings, scores)
        write_text_atomic(out_dir / SCORES_CSV, scores_csv_text(scores))
        summary = run_summary(settings, scores)
        if dataset_root is not None:
            summary["dataset_root"] = os.fspath(Path(dataset_root).resolve())
        write_json_atomic(out_dir / SUMMARY_JSON, summary)
        gallery = _write_gallery(step, out_dir, picks, scores, _model_name(model)) if picks else None
        return ExplainResult(out_dir, summary, out_dir / SCORES_CSV, gallery)


def mask_files(items: Sequence[Item], masks_dir: Path, dataset_name: str) -> list[MaskFile]:
    """Each item's mask: its ground-truth mask where it has one, else its saliency mask under ``masks_dir``.

    Every file must exist (else a ``DatasetError`` / ``ImageError`` naming the missing ones and the fix).
    """
    shipped = [item.ground_truth_mask for item in items if item.ground_truth_mask is not None]
    missing = missing_files(shipped)
    if missing:
        raise DatasetError(
            f"{len(missing)} ground-truth masks listed by the dataset are missing: {describe_paths(missing)}",
            path=missing[0],
            fix="re-extract the dataset (its mask files) completely",
        )
    unshipped = [item for item in items if item.ground_truth_mask is None]
    saliency = iter(saliency_masks(unshipped, masks_dir, dataset_name))
    return [
        MaskFile(item.ground_truth_mask, GROUND_TRUTH)
        if item.ground_truth_mask is not None
        else MaskFile(next(saliency), SALIENCY)
        for item in items
    ]


def load_example(
    item: Item, mask: MaskFile, geometry: EvalGeometry, dataset_name: str
) -> tuple[np.ndarray, np.ndarray]:
    """The eval crop (uint8 H×W×3) and its soft mask (uint8 H×W) of one item."""
    image = load_image(item.image)
    if mask.source == SALIENCY:
        picture = load_matching_mask(mask.path, image.size, item, dataset_name)
    else:
        picture = load_mask(mask.path)
        if picture.size != image.size:
            raise ImageError(
                f"ground-truth mask size {picture.size} differs from image {item.id}'s size {image.size}",
                path=mask.path,
                fix="re-extract the dataset: its mask files must match its images",
            )
    return eval_transform_pair(image, picture, geometry)


def image_generator(seed: int, image_id: str) -> torch.Generator:
    """A CPU generator owned by one image: seeded by (seed, a hash of its id), not its batch or position."""
    import torch

    key = int.from_bytes(hashlib.sha256(image_id.encode("utf-8")).digest()[:8], "big")
    state = np.random.SeedSequence([seed, key]).generate_state(2, np.uint32)
    return torch.Generator().manual_seed((int(state[0]) << 31) ^ int(state[1]))


def score_image(
    item: Item, source: str, mask: np.ndarray, attribution_map: np.ndarray, reference: Item | None = None
) -> ImageScore:
    """The foreground score of one map against its uint8 soft mask (divided by 255, not binarised); with the
    ``reference`` image the map was made against, where there is one."""
    soft = mask.astype(np.float64) / 255.0
    return ImageScore(
        id=item.id,
        label=item.label,
        mask_source=source,
        foreground_fraction=foreground_fraction(soft),
        attribution_on_foreground=attribution_on_foreground(soft, attribution_map),
        score=foreground_score(soft, attribution_map),
        reference=None if reference is None else reference.id,
        reference_label=None if reference is None else reference.label,
    )


def run_summary(settings: dict[str, Any], scores: Sequence[ImageScore]) -> dict[str, Any]:
    """``summary.json``: what was run (the settings a reader needs), image and mask-source counts, and the
    statistics of the scores."""
    sources = Counter(score.mask_source for score in scores)
    summary = {
        **{key: settings[key] for key in ("dataset", "attribution", "options", "seed", "geometry")},
        "model_sha256": settings["model_sha256"],
        "installation": installation(),
        "images": len(scores),
        "mask_sources": {source: sources[source] for source in MASK_SOURCES},
        **score_statistics([score.score for score in scores]),
    }
    if "references" in settings:
        same = sum(score.reference_label == score.label for score in scores)
        summary["references"] = {"rule": settings["references"], "same_class": same,
                                 "other_class": len(scores) - same}
    return summary


def score_statistics(values: Sequence[float]) -> dict[str, Any]:
    """Counts and mean / sample std (ddof = 1) / median of the defined (non-NaN) scores; ``None`` where a
    statistic needs more scores than there are."""
    defined = np.array([value for value in values if not np.isnan(value)], dtype=np.float64)
    count = len(defined)
    return {
        "scored": count,
        "undefined": len(values) - count,
        "mean": float(defined.mean()) if count else None,
        "std": float(defined.std(ddof=1)) if count > 1 else None,
        "median": float(np.median(defined)) if count else None,
    }


def scores_csv_text(scores: Sequence[ImageScore]) -> str:
    """``scores.csv``: one row per image; numbers with 6 decimals, an empty cell where undefined. Where the
    maps were made against reference images, each row ends with its reference's id and label."""
    referenced = any(score.reference is not None for score in scores)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS + REFERENCE_COLUMNS if referenced else CSV_COLUMNS)
    for score in scores:
        numbers = (score.foreground_fraction, score.attribution_on_foreground, score.score)
        row = [score.id, score.label, score.mask_source, *(_cell(value) for value in numbers)]
        writer.writerow([*row, score.reference, score.reference_label] if referenced else row)
    return buffer.getvalue()


def map_path(item: Item, out_dir: Path) -> Path:
    """Where a gallery image's map is kept: its path mirrored under ``out_dir/maps`` as a PNG."""
    return mask_path(item, Path(out_dir) / MAPS_DIR)


def reference_map_path(item: Item, out_dir: Path) -> Path:
    """Where the map of a gallery image's reference (made with that image) is kept: the image's path
    mirrored under ``out_dir/reference-maps`` as a PNG."""
    return mask_path(item, Path(out_dir) / REFERENCE_MAPS_DIR)


def save_map(path: Path, attribution_map: np.ndarray) -> None:
    """A map in [0, 1] as an 8-bit greyscale PNG, atomically."""
    pixels = np.rint(np.clip(attribution_map, 0.0, 1.0) * 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    write_bytes_atomic(path, buffer.getvalue())


def load_map(path: Path) -> np.ndarray:
    """A map saved by :func:`save_map`, back in [0, 1] (8-bit precision)."""
    return np.asarray(load_mask(path), dtype=np.float64) / 255.0


def score_text(score: float) -> str:
    """A foreground score as galleries caption it: two decimals, ``n/a`` where undefined."""
    return "n/a" if np.isnan(score) else f"{score:.2f}"


class _Step:
    """Loads, attributes and scores a list of item positions; shared by the main loop and the gallery."""

    def __init__(
        self,
        model: EmbeddingModel,
        attributor: Attribution,
        items: Sequence[Item],
        masks: Sequence[MaskFile],
        geometry: EvalGeometry,
        dataset_name: str,
        device: torch.device,
        seed: int,
        references: dict[str, Item] | None = None,
    ):
        self.model, self.attributor, self.items, self.masks = model, attributor, items, masks
        self.geometry, self.dataset_name, self.device, self.seed = geometry, dataset_name, device, seed
        self.references = references
        """Each item's reference image by id, for an attribution that needs them (else None)."""

    def load(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        return load_example(self.items[index], self.masks[index], self.geometry, self.dataset_name)

    def reference(self, index: int) -> Item | None:
        return None if self.references is None else self.references[self.items[index].id]

    def load_reference(self, index: int) -> np.ndarray:
        """The eval crop (uint8 H×W×3) of an item's reference image."""
        reference = self.reference(index)
        assert reference is not None
        return eval_transform(load_image(reference.image), self.geometry)

    def __call__(self, indices: Sequence[int]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, ImageScore]]:
        examples = [self.load(index) for index in indices]
        images = self._tensor([image for image, _mask in examples])
        generators = [image_generator(self.seed, self.items[index].id) for index in indices]
        if self.references is None:
            maps = self.attributor(self.model, images, generators)
        else:
            references = self._tensor([self.load_reference(index) for index in indices])
            maps = self.attributor(self.model, images, generators, references)
        maps = maps.detach().float().cpu().numpy()
        results = []
        for index, (image, mask), attribution_map in zip(indices, examples, maps, strict=True):
            score = score_image(self.items[index], self.masks[index].source, mask, attribution_map,
                                self.reference(index))
            results.append((image, mask, attribution_map, score))
        return results

    def reference_map(self, index: int) -> np.ndarray:
        """The map of an item's reference image in their pair: the attribution with the roles swapped."""
        image, _mask = self.load(index)
        generator = image_generator(self.seed, self.items[index].id)
        maps = self.attributor(self.model, self._tensor([self.load_reference(index)]), [generator],
                               self._tensor([image]))
        return maps.detach().float().cpu().numpy()[0]

    def _tensor(self, pictures: Sequence[np.ndarray]) -> torch.Tensor:
        """uint8 H×W×3 pictures as a (B, 3, H, W) float batch in [0, 1] on the device."""
        import torch

        pixels = np.stack(pictures).transpose(0, 3, 1, 2)
        return torch.from_numpy(pixels).to(self.device).float().div_(255)


def _write_gallery(
    step: _Step, out_dir: Path, picks: Sequence[int], scores: Sequence[ImageScore], model: str
) -> Path:
    """The gallery of ``picks`` from their saved maps; a map that is missing (deleted by hand) is computed
    again, which gives the same map since its noise depends only on the seed and the image. Where the maps
    were made against reference images, each row goes on with the reference and the overlay of its map."""
    images, masks, maps, captions = [], [], [], []
    referenced: list[np.ndarray] = []
    reference_overlays: list[np.ndarray] = []
    for index in picks:
        path = map_path(step.items[index], out_dir)
        if not path.is_file():
            save_map(path, step([index])[0][2])
        image, mask = step.load(index)
        images.append(image)
        masks.append(mask)
        maps.append(load_map(path))
        caption = f"{step.items[index].id}  score {score_text(scores[index].score)}"
        reference = step.reference(index)
        if reference is not None:
            reference_path = reference_map_path(step.items[index], out_dir)
            if not reference_path.is_file():
                save_map(reference_path, step.reference_map(index))
            picture = step.load_reference(index)
            referenced.append(picture)
            reference_overlays.append(overlay(picture, load_map(reference_path)))
            caption += f"  reference {reference.id}"
        captions.append(caption)
    extra = {"reference": referenced, "its map": reference_overlays} if referenced else None
    return attribution_gallery(out_dir / GALLERY_PNG, images, masks, {model: maps}, captions,
                               extra_columns=extra)


def _check_request(items: Sequence[Item], batch_size: int, gallery_count: int, seed: int) -> None:
    if not items:
        raise OptionError("there are no images to explain", fix="pass a split that holds images")
    duplicates = [image_id for image_id, n in Counter(item.id for item in items).items() if n > 1]
    if duplicates:
        raise OptionError(
            f"images are listed twice: {', '.join(duplicates[:5])}", fix="pass each image once"
        )
    if batch_size < 1:
        raise OptionError(f"batch size {batch_size} is too small", fix="use a batch size of 1 or more")
    if gallery_count < 0:
        raise OptionError(f"gallery count {gallery_count} is negative", fix="use 0 for no gallery")
    if seed < 0:
        raise OptionError(f"seed {seed} is negative", fix="use a seed >= 0")


def _saliency_dir(masks: Sequence[MaskFile], masks_dir: Path) -> str | None:
    """The saliency masks folder when any item uses it (its masks change the scores), else ``None``."""
    return os.fspath(masks_dir.resolve()) if any(m.source == SALIENCY for m in masks) else None


def _model_name(model: EmbeddingModel) -> str:
    """How the gallery names the model: its method where its description says it."""
    return str(model.describe().get("method", type(model).__name__))


def _cell(value: float) -> str:
    return "" if np.isnan(value) else f"{value:.6f}"


def explain(
    model: EmbeddingModel, request: MeasureRequest | None = None, *, log: Callable[[str], None] = print
) -> ExplainResult:
    """``bgbias explain``: foreground scores of ``model`` on the split ``request`` names (default: the test
    split of the dataset it was trained on) with the request's attribution and options, into
    ``<model home>/explain/<dataset key>-<split>-<label>/`` (:func:`explain_dir`), so each attribution and
    setting keeps its own folder and ``request.force`` starts over in that one only.

    ``request.limit`` scores that many images spread evenly over the split instead of all (an attribution
    with reference images still picks them from the whole split, so an image's reference does not depend on
    the limit); saliency masks
    (``request.masks``, default ``masks/<dataset>``) stand in for images without a ground-truth mask;
    ``request.batch_size`` images go through the attribution at once (default 1 on the CPU, where it is
    fastest, 8 on CUDA).
    """
    from bgbias.data.items import default_masks_dir

    request = request or MeasureRequest()
    attribution, options = request.attribution, request.attribution_options
    label = attribution_label(attribution, build_attribution(attribution, **options).options())
    dataset, items = requested_split(model, request)
    split = items
    if request.limit is not None:
        if request.limit < 1:
            raise OptionError(f"--limit must be at least 1, got {request.limit}",
                              fix="pass a positive image count")
        items = [items[i] for i in evenly_spread(len(items), request.limit)]
    batch_size = request.batch_size or (8 if model.device.type == "cuda" else 1)
    log(f"explaining {len(items)} {request.split} images of {dataset.name} with {label}")
    result = explain_items(
        model, items, measured_geometry(model, dataset.name),
        masks_dir=Path(request.masks) if request.masks is not None else default_masks_dir(dataset),
        dataset_name=dataset.name, out_dir=explain_dir(model.home, dataset.key, request.split, label),
        attribution=attribution, options=options, device=model.device, seed=request.attribution_seed,
        batch_size=batch_size, gallery_count=request.gallery_count, progress=request.progress,
        force=request.force, reference_items=split, dataset_root=dataset.root, log=log,
    )
    summary = result.summary
    if summary["mean"] is not None:
        spread = "" if summary["std"] is None else f" ± {summary['std']:.3f}"
        log(f"foreground score {summary['mean']:.3f}{spread} over {summary['scored']} images")
    return result


def explain_dir(home: str | os.PathLike[str], dataset_key: str, split: str, label: str) -> Path:
    """Where a model's foreground scores of one dataset (its key), split and attribution with its options
    (:func:`~bgbias.methods.attribution.attribution_label`) go: ``<home>/explain/<key>-<split>-<label>``."""
    return Path(home) / EXPLAIN_FOLDER / f"{dataset_key}-{split}-{label}"


@dataclass(frozen=True)
class ExplainedSet:
    """One ``<run>/explain/<dataset key>-<split>-<label>/`` folder with its summary."""

    dataset_key: str
    label: str
    folder: Path
    summary: dict[str, Any]


def read_summary(out_dir: str | os.PathLike[str]) -> ExplainSummary:
    """The ``summary.json`` of the explanation in ``out_dir``; a missing or damaged one is a
    ``RecordError``."""
    return read_record(Path(out_dir) / SUMMARY_JSON, ExplainSummary, what="the explanation's summary",
                       fix=EXPLAIN_AGAIN)


def explained_sets(run_root: str | os.PathLike[str], split: str) -> list[ExplainedSet]:
    """The finished explanations (those with a ``summary.json``) of ``split`` in a run folder, sorted by
    folder name. A folder's name is cut where its summary's attribution name follows ``-<split>-``, so
    reading it needs no registered attribution; other folders are ignored, a damaged summary is a
    ``RecordError`` naming it."""
    found = []
    for summary_path in sorted(Path(run_root).glob(f"{EXPLAIN_FOLDER}/*/{SUMMARY_JSON}")):
        summary = read_summary(summary_path.parent)
        name = summary["attribution"]
        key, found_at, options = summary_path.parent.name.rpartition(f"-{split}-{name}")
        if found_at and key and (not options or options.startswith("-")):
            found.append(ExplainedSet(key, name + options, summary_path.parent, summary))
    return found
