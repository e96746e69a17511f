"""Score how much of a model's attribution falls on the object, image by image (the paper's Table 2).

Each item's eval crop and soft mask (ground truth where the dataset ships one, else U²-Net's), its attribution
map and the map's foreground score; the folder's files are :mod:`~bgbias.attribution.outputs`'. Noise is
seeded by (seed, image id), so maps do not depend on the batch size, on resuming, or on which other images are
scored. An attribution that ``needs_references`` explains each image against its nearest classmate in the
whole split (:mod:`bgbias.attribution.references`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import shutil
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from tqdm import tqdm

from bgbias.attribution.outputs import (
    MAPS_DIR,
    REFERENCE_MAPS_DIR,
    SCORES_CSV,
    SUMMARY_JSON,
    explain_dir,
    map_path,
    run_summary,
    save_map,
    scores_csv_text,
    write_gallery,
)
from bgbias.attribution.records import (
    RECORDS_NAME,
    SALIENCY,
    SCORE_LEDGER,
    claim_out_dir,
    normalised_settings,
    write_ledger,
)
from bgbias.attribution.references import check_reference_pool, pick_references, reference_rule
from bgbias.attribution.scoring import ImageScorer, mask_files
from bgbias.corrupted.gallery import evenly_spread
from bgbias.corrupted.manifests import ids_sha256
from bgbias.data.eval_images import EvalImages
from bgbias.data.items import Item, default_masks_dir
from bgbias.data.transforms import EvalGeometry
from bgbias.engine.device import model_memory_format, precision_name
from bgbias.errors import BusyError, OptionError
from bgbias.fileio import exclusive_lock, folder_lock_path, write_json_atomic, write_text_atomic
from bgbias.measurement.request import MeasureRequest, chosen_split, measured_geometry, requested_split
from bgbias.methods.attribution import attribution_label, build_attribution, check_supported, needs_references
from bgbias.methods.embedding_model import claim_home
from bgbias.signals import sigterm_as_interrupt

if TYPE_CHECKING:
    import numpy as np

    from bgbias.attribution.records import ImageScore
    from bgbias.methods.embedding_model import EmbeddingModel


@dataclass(frozen=True)
class ExplainResult:
    """The summary that ``summary.json`` holds, every image's score (typed, in the split's order), and where
    the files went (None each when nothing was written). ``maps`` holds every image's attribution map by
    id (float32, crop × crop) when nothing was written; with files, the gallery's are in ``out_dir/maps``."""

    out_dir: Path | None
    summary: dict[str, Any]
    scores_csv: Path | None
    gallery: Path | None
    scores: list[ImageScore]
    maps: dict[str, np.ndarray]


def _holding_out_dir(out_dir: Path) -> contextlib.AbstractContextManager[None]:
    """Hold ``out_dir``'s lock while it is written (a ``BusyError`` at once when another process holds it: it
    would sweep, append to and rewrite what that one writes)."""
    busy = BusyError(f"another process is explaining into {out_dir}", path=out_dir,
                     fix="wait for it to finish, or explain with other settings (another folder)")
    return exclusive_lock(folder_lock_path(out_dir), wait=False, busy=busy)


@dataclass(frozen=True)
class ExplainInputs:
    """What an explanation's request resolves to (:func:`explain` resolves it): the images to explain at
    their geometry, the folders of their masks and of the results, and the images references come from."""

    items: Sequence[Item]
    geometry: EvalGeometry
    dataset_name: str
    masks_dir: Path
    """Saliency masks, for images without a ground-truth mask."""
    out_dir: Path | None
    """None: nothing is written (no resume); the result holds every map."""
    reference_items: Sequence[Item] | None = None
    """For an attribution that ``needs_references``, the images each item's reference is picked from
    (default: ``items``; it must hold them)."""
    dataset_root: Path | None = None
    """The dataset's folder: it goes into ``summary.json``, so that a gallery made later (``bgbias report``)
    opens the images that were explained."""


@sigterm_as_interrupt()  # SIGTERM taken like Ctrl-C (bgbias.signals)
def explain_items(
    model: EmbeddingModel,
    inputs: ExplainInputs,
    request: MeasureRequest | None = None,
    *,
    log: Callable[[str], None] = print,
) -> ExplainResult:
    """Attribution maps and foreground scores of ``inputs.items`` with ``model`` and the settings of
    ``request`` (``batch_size`` defaults to 1 on the CPU, 8 on CUDA).

    Resumes an interrupted run with the same settings in ``inputs.out_dir``; results of other settings there
    are an ``OptionError`` unless ``request.force``. An unsupported attribution and missing masks fail before
    any work. References (``needs_references``) are picked from ``inputs.reference_items``, their state from
    the evaluation cache where it fits. The maps are made in float32 without autocast whatever the model's
    ``amp`` (:class:`~bgbias.attribution.scoring.ImageScorer`); ``summary.json`` records that precision."""
    request = request or MeasureRequest()
    items, geometry, dataset_name = list(inputs.items), inputs.geometry, inputs.dataset_name
    masks_dir, reference_items = Path(inputs.masks_dir), inputs.reference_items
    attribution, seed, force = request.attribution, request.attribution_seed, request.force
    gallery_count, progress, device = request.gallery_count, request.progress, model.device
    batch_size = request.batch_size or (8 if device.type == "cuda" else 1)
    _check_request(items, batch_size, gallery_count, seed)
    attributor = build_attribution(attribution, **request.attribution_options)
    check_supported(attribution, attributor, model)
    referenced = needs_references(attributor)
    pool = list(reference_items) if reference_items is not None else items
    if referenced:
        check_reference_pool(items, pool)
    masks = mask_files(items, masks_dir, dataset_name)
    settings = {
        "dataset": dataset_name,
        "attribution": attribution,
        "options": attributor.options(),
        "seed": seed,
        "geometry": geometry.as_dict(),
        "items_sha256": ids_sha256(items),
        "model_sha256": model.fingerprint(),
        # The saliency masks folder where any item uses it (its masks change the scores).
        "masks_dir": os.fspath(masks_dir.resolve()) if any(m.source == SALIENCY for m in masks) else None,
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
    # The maps' precision: attribution never autocasts (ImageScorer).
    compute = {"device": str(device), "precision": precision_name(None),
               "memory_format": model_memory_format(model)}
    out_dir = None if inputs.out_dir is None else Path(inputs.out_dir)
    with contextlib.ExitStack() as held:
        done: dict[str, ImageScore] = {}
        if out_dir is not None:
            claim_home(model)
            # The folder's lock only now: a model that failed the probe leaves no folder, not even a lock's.
            held.enter_context(_holding_out_dir(out_dir))
            if force:
                shutil.rmtree(out_dir / MAPS_DIR, ignore_errors=True)
                shutil.rmtree(out_dir / REFERENCE_MAPS_DIR, ignore_errors=True)
            done = claim_out_dir(out_dir, settings, force)
        picks = evenly_spread(len(items), gallery_count)
        picked = set(picks)
        todo = [index for index, item in enumerate(items) if item.id not in done]
        references: dict[str, Item] | None = None
        if referenced:
            by_id = {item.id: item for item in pool}
            references = {score.id: by_id[score.reference] for score in done.values() if score.reference}
            references.update(pick_references(model, pool, [items[i] for i in todo], geometry, dataset_name,
                                              progress=progress, log=log, on_disk=out_dir is not None))
        step = ImageScorer(model, attributor, items, masks, geometry, dataset_name, device, seed, references)
        ledger = None if out_dir is None else held.enter_context(SCORE_LEDGER.log(out_dir / RECORDS_NAME))
        maps: dict[str, np.ndarray] = {}
        with tqdm(total=len(items), initial=len(items) - len(todo), desc="explain", unit="img",
                  disable=not progress) as bar:
            for batch in _batches(todo, batch_size):
                for index, (_image, _mask, attribution_map, score) in zip(batch, step(batch), strict=True):
                    if out_dir is None:  # nothing written: the result holds every map
                        maps[items[index].id] = attribution_map
                    elif index in picked:
                        save_map(map_path(items[index], out_dir), attribution_map)
                        if referenced:
                            save_map(map_path(items[index], out_dir, REFERENCE_MAPS_DIR),
                                     step.reference_map(index))
                    if ledger is not None:
                        ledger.append(score)
                    done[score.id] = score
                bar.update(len(batch))
        scores = [done[item.id] for item in items]
        summary = run_summary(settings, scores, compute)
        if out_dir is None:
            return ExplainResult(None, summary, None, None, scores, maps)
        write_ledger(out_dir / RECORDS_NAME, settings, scores)
        write_text_atomic(out_dir / SCORES_CSV, scores_csv_text(scores))
        if inputs.dataset_root is not None:
            summary["dataset_root"] = os.fspath(Path(inputs.dataset_root).resolve())
        write_json_atomic(out_dir / SUMMARY_JSON, summary)
        name = str(model.describe().get("method", type(model).__name__))  # the gallery's name of the model
        gallery = write_gallery(step, out_dir, picks, scores, name) if picks else None
        return ExplainResult(out_dir, summary, out_dir / SCORES_CSV, gallery, scores, {})


def _batches(indices: Sequence[int], batch_size: int) -> list[list[int]]:
    """``indices`` in batches that keep their place in the item list (``index // batch_size``): a resumed
    run sees the batches an uninterrupted one did."""
    return [list(group) for _, group in itertools.groupby(indices, key=lambda index: index // batch_size)]


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


def explain(
    model: EmbeddingModel,
    request: MeasureRequest | None = None,
    *,
    log: Callable[[str], None] = print,
    write: bool = True,
) -> ExplainResult:
    """``bgbias explain``: foreground scores of ``model`` on the split ``request`` names (default: the test
    split of the dataset it was trained on) into :func:`~bgbias.attribution.outputs.explain_dir`, a folder per
    attribution and setting (``request.force`` starts over in that one only). ``request.limit`` scores that
    many images spread evenly (references are still picked from the whole split, so they do not depend on the
    limit). Without ``write`` nothing goes to disk and the result holds every map."""
    request = request or MeasureRequest()
    request = dataclasses.replace(request, split=chosen_split(model, request)[0])
    attribution, options = request.attribution, request.attribution_options
    label = attribution_label(attribution, build_attribution(attribution, **options).options())
    dataset, items = requested_split(model, request)
    split = items
    if request.limit is not None:
        items = [items[i] for i in evenly_spread(len(items), request.limit)]
    log(f"explaining {len(items)} {request.split} images of {dataset.name} with {label}")
    inputs = ExplainInputs(
        items, measured_geometry(model, dataset.name), dataset.name,
        masks_dir=Path(request.masks) if request.masks is not None else default_masks_dir(dataset),
        out_dir=explain_dir(model.home, dataset.key, request.split, label) if write else None,
        reference_items=split,
        dataset_root=dataset.root,
    )
    result = explain_items(model, inputs, request, log=log)
    summary = result.summary
    if summary["mean"] is not None:
        spread = "" if summary["std"] is None else f" ± {summary['std']:.3f}"
        log(f"foreground score {summary['mean']:.3f}{spread} over {summary['scored']} images")
    return result
