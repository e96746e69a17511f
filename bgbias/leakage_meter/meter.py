"""The dataset's background leakage meter: how much of the class the background alone gives away, before
any model is trained on the dataset (docs/leakage.md, *How it is computed*).

An image whose mask shows no object keeps its object in the background-only view and is black in the
object-only one, so its class reads as leaking: such images are counted, per class and in all, and the page
says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bgbias.bgaugment.mask_check import empty_masks
from bgbias.data.items import Dataset, default_masks_dir
from bgbias.data.splits import split_items
from bgbias.engine.embedding import embed_images
from bgbias.errors import DatasetError, OptionError
from bgbias.fileio import make_dirs
from bgbias.leakage_meter.calibration import bench_equivalent
from bgbias.leakage_meter.class_gallery import CLASS_GALLERY, write_class_gallery
from bgbias.leakage_meter.headline import bootstrap_interval, leakage_share
from bgbias.leakage_meter.probe import probe_chance, probe_predictions
from bgbias.leakage_meter.result import ClassLeakage, DatasetLeakage, ViewScores
from bgbias.leakage_meter.views import VIEWS, ViewImages
from bgbias.measurement.request import measured_geometry
from bgbias.retrieval.metrics import chance_per_query, chance_scores, score_embeddings
from bgbias.saliency.records import masks_record

if TYPE_CHECKING:
    from bgbias.data.geometry import EvalGeometry
    from bgbias.methods.embedding_model import EmbeddingModel

DEFAULT_ENCODER = "bgbias.models.pretrained:imagenet_mobilenet_v2"
"""The frozen encoder the API measures with unless told otherwise (and ``bgbias leakage``'s ``--model``
default): the ImageNet MobileNetV2 of the offline assets, pooled features, as an outside model's factory
spec."""
DEFAULT_FILL = "inpainted"
"""The meter's fill: inpainting hides the object's silhouette, which black keeps (a shape leak), and follows
the background around the hole, which tiling does not; on the bias dial it reads closest to chance at ρ = 0
and separates ρ widest of the three (docs/leakage.md, "Calibration on the bias dial")."""


def measure_leakage(
    dataset: Dataset,
    model: EmbeddingModel,
    *,
    split: str = "test",
    masks_dir: str | Path | None = None,
    fill: str = DEFAULT_FILL,
    geometry: EvalGeometry | None = None,
    batch_size: int = 64,
    workers: int | None = None,
    seed: int = 0,
    progress: bool = False,
    out: str | Path | None = None,
) -> DatasetLeakage:
    """The background leakage of ``split`` of ``dataset`` seen through ``model`` (frozen; put in eval mode),
    at its measured geometry unless ``geometry`` is given; ``seed`` fixes the probe's folds and the bootstrap.
    With ``out``, ``leakage.json``, ``leakage.md`` and the per-class picture are written there."""
    items = split_items(dataset, split)
    labels = np.array([item.label for item in items], np.int64)
    if len(np.unique(labels)) < 2:
        raise DatasetError(f"the {split!r} split of the {dataset.name} dataset has one class: no class can "
                           "be given away", path=dataset.root, fix="measure a split with two classes or more")
    geometry = geometry or measured_geometry(model, dataset.name)
    masks = Path(masks_dir) if masks_dir is not None else default_masks_dir(dataset)
    images = {view: ViewImages(items, view, masks_dir=masks, dataset_name=dataset.name, geometry=geometry,
                               fill=fill) for view in VIEWS}
    states = {}
    for view in VIEWS:
        state, embedded_labels = embed_images(model, images[view], model.device, batch_size=batch_size,
                                              workers=workers, amp=model.amp, progress=progress,
                                              desc=f"{view} only")
        if not np.array_equal(embedded_labels, labels):
            raise AssertionError("the embedded images came back out of their dataset's order")
        states[view] = state
    scores = {view: score_embeddings(states[view], labels, retrieval=model.retrieval()) for view in VIEWS}
    probes = {view: probe_predictions(_probe_input(states[view]), labels, seed=seed) for view in VIEWS}
    chance = chance_scores(labels)
    per_query_chance = chance_per_query(labels)["map_at_r"]
    views = {view: ViewScores(scores[view].map_at_r, scores[view].precision_at_1,
                              float((probes[view] == labels).mean()), degenerate(states[view]))
             for view in VIEWS}
    background, foreground = (scores[view].per_query["map_at_r"] for view in VIEWS)
    encoder = str(model.describe().get("method", ""))
    flagged = set(empty_masks(items, masks))
    folder = masks if any(item.saliency_mask is None for item in items) else None
    empty = np.array([item.id in flagged for item in items], dtype=bool)
    if any(views[view].degenerate for view in VIEWS):  # nothing to read a share off
        leakage, interval, per_class, bench = float("nan"), (float("nan"), float("nan")), (), None
    else:
        leakage = leakage_share(views["background"].map_at_r, views["foreground"].map_at_r,
                                chance["map_at_r"])
        interval = bootstrap_interval(background, foreground, chance["map_at_r"], seed=seed)
        per_class = class_leakage(labels, background, foreground, per_query_chance, dataset.class_names(),
                                  empty)
        bench = bench_equivalent(leakage, interval, encoder=encoder, fill=fill)
    result = DatasetLeakage(
        dataset=dataset.name, split=split, fill=fill, model=encoder, images=len(items),
        classes=len(np.unique(labels)), leakage=leakage, interval=interval,
        background=views["background"], foreground=views["foreground"],
        chance=ViewScores(chance["map_at_r"], chance["precision_at_1"], probe_chance(labels)),
        per_class=per_class, empty_masks=int(empty.sum()), bench_rho=bench,
        **masks_record(folder),
    )
    if out is not None:
        picture = None
        if result.per_class:
            picture = write_class_gallery(make_dirs(out) / CLASS_GALLERY, images["background"], labels,
                                          background, scores["background"].neighbours, result.per_class)
        result.write(out, picture=picture.name if picture else None)
    return result


def degenerate(state: dict[str, np.ndarray]) -> str | None:
    """Why a view's images carry no information to retrieve or probe (every image embeds to exactly the one
    vector: masks all full leave no background, all empty no object), or None. Its scores are then chance by
    definition (ties score their expectation, docs/design.md) and no share is read off them."""
    arrays = [array.reshape(len(array), -1) for array in state.values()]
    if all((array == array[:1]).all() for array in arrays):
        return f"all {len(arrays[0])} images embed to one vector"
    return None


def class_leakage(labels: np.ndarray, background: np.ndarray, foreground: np.ndarray,
                  chance: np.ndarray, names: Mapping[int, str] | None = None,
                  empty: np.ndarray | None = None) -> tuple[ClassLeakage, ...]:
    """Each class's mean MAP@R in both views and by chance (its images' own), its name (``names``; else its
    label) and how many of its images' masks are empty (``empty``, per image), the classes whose background
    retrieves most above chance first (ties by label); classes of one image, which retrieve nothing, left
    out."""
    names = names or {}
    empty = np.zeros(len(labels), dtype=bool) if empty is None else empty
    rows = []
    for label in np.unique(labels):
        members = (labels == label) & ~np.isnan(chance)
        if not members.any():
            continue
        bg, fg, floor = (float(values[members].mean()) for values in (background, foreground, chance))
        rows.append(ClassLeakage(int(label), int((labels == label).sum()), bg, fg, floor,
                                 leakage_share(bg, fg, floor), names.get(int(label), str(label)),
                                 int(empty[labels == label].sum())))
    return tuple(sorted(rows, key=lambda row: (-row.background_above_chance, row.label)))


def _probe_input(state: dict[str, np.ndarray]) -> np.ndarray:
    """The one array of a model's per-image state the probe reads: its embedding."""
    if "embedding" not in state:
        raise OptionError(f"the model's per-image state has no 'embedding' (it has {', '.join(state)})",
                          fix="measure leakage with a model whose embed returns one embedding tensor, or a "
                              "mapping with an 'embedding' entry")
    return state["embedding"].reshape(len(state["embedding"]), -1)
