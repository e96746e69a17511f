"""What to measure a model on: one :class:`MeasureRequest` shared by ``bgbias eval``, ``score``, ``explain``
and ``study``, and made concrete once (:func:`resolve`: the dataset, split, images, geometry, retrieval and
the report's folder name), which the rest of the measurement reads instead of resolving again.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bgbias.data.items import Dataset, default_masks_dir
from bgbias.data.registry import open_dataset
from bgbias.data.splits import split_items
from bgbias.data.transforms import eval_geometry
from bgbias.errors import PARAMETER, DatasetError, OptionError, given
from bgbias.methods.embedding_model import OwnGeometry
from bgbias.paths import backgrounds_root, located_key
from bgbias.retrieval.retrievers import ExactL2, with_shortlist
from bgbias.saliency.ground_truth import default_ground_truth_dir

if TYPE_CHECKING:
    from bgbias.data.geometry import EvalGeometry
    from bgbias.data.items import Item
    from bgbias.methods.embedding_model import EmbeddingModel, TrainedOn
    from bgbias.retrieval.retrievers import Retrieval

OWN_IMAGES = frozenset({"folder", "table"})
"""The datasets of one's own images (a folder of class folders, a table or a torch Dataset)."""

DEFAULT_PROTOCOL, DEFAULT_FOLD = "fixed", 0
"""The split protocol for a model whose training dataset is unknown: the paper's fixed split."""


@dataclass(frozen=True)
class MeasureRequest:
    """Which images, and how to measure a model on them (every field has the command line's default)."""

    # The images: a split of a dataset (default: the one the model was trained on, at its folder), by name
    # or opened (a table of one's own, bgbias.data.table).
    dataset: str | Dataset | None = None
    root: Path | None = None
    split: str | None = None
    """``test``, ``val`` or ``all``; None: :func:`chosen_split` picks it."""
    masks: Path | None = None
    """Saliency masks (default ``masks/<dataset>``): corrupted sets and foreground scores use them."""

    # Evaluation: corrupted repeats fixed by ``seed``, from ``backgrounds`` (its ``test/`` pool).
    corrupted: bool = False
    repeats: int = 5
    seed: int = 0
    backgrounds: Path | None = None
    manifests: Path | None = None
    shortlist: int | None = None
    """Rank by an L2 shortlist of this many images re-ranked by a learned distance (approximate)."""
    compare_masks: Path | None = None
    """A second masks folder: the paper's corrupted repeats cut out with these masks too, on the same
    backgrounds, for the mask sensitivity (``bgbias.measurement.mask_sensitivity``); needs the corrupted
    repeats."""
    profile: bool = False
    """Also the background-reliance profile (``bgbias.measurement.scoring``); implies the corrupted
    repeats."""
    worst_k: int = 10
    """Backgrounds per query of the profile's worst case: the first ``worst_k`` corrupted repeats."""

    # Attribution maps and foreground scores.
    limit: int | None = None
    """Score this many images spread evenly over the split instead of all."""
    attribution: str = "smoothgrad"
    attribution_options: dict[str, Any] = field(default_factory=dict)
    attribution_seed: int = 0
    gallery_count: int = 16
    force: bool = False

    # Running.
    batch_size: int | None = None
    """Images per forward pass (default: 64 for evaluation; 1 on the CPU, 8 on CUDA for attribution)."""
    workers: int | None = None
    """Data-loader processes (None: sized to the machine, bgbias.hardware)."""
    max_memory: int | None = None
    """Bytes the scoring's neighbour lists may take at once (None: 1 GiB, bgbias.retrieval.metrics)."""
    progress: bool = True


def split_protocol(trained: TrainedOn | None) -> tuple[str, int]:
    """The split protocol and fold a model is measured under: those it trained with, else the fixed split."""
    return (trained.protocol, trained.fold) if trained is not None else (DEFAULT_PROTOCOL, DEFAULT_FOLD)


def chosen_split(model: EmbeddingModel, request: MeasureRequest) -> tuple[str, str]:
    """The split ``request`` scores, and why, as the report says it: the one asked for; else ``all`` for a
    model bgbias did not train (no training record) on one's own images, since it saw none of their classes
    and the test split would score only their second half; else ``test``, the held-out classes."""
    if request.split is not None:
        return request.split, f"{request.split}, as asked"
    name = request.dataset.name if isinstance(request.dataset, Dataset) else request.dataset
    if model.trained_on() is None and name in OWN_IMAGES:
        return "all", ("all, every image as query and gallery: the default for a model bgbias did not train, "
                       "on one's own images (the test split would score only the second half of the classes)")
    return "test", "test, the held-out classes (the default)"


def requested_split(model: EmbeddingModel, request: MeasureRequest) -> tuple[Dataset, list[Item]]:
    """The dataset and split items ``request`` names, under the split protocol and fold the model trained
    with. Without ``request.dataset`` and ``request.root`` the dataset must still be the one the model was
    trained on: a changed or replaced folder is a ``DatasetError``, never a score of another dataset."""
    trained = model.trained_on()
    split = chosen_split(model, request)[0]
    if isinstance(request.dataset, Dataset):  # opened by the caller: asked for on purpose
        return request.dataset, split_items(request.dataset, split, *split_protocol(trained))
    if trained is None:
        if request.dataset is None:
            raise OptionError("this model records no training dataset, so there is no default to score it on",
                              fix=f"name the dataset ({PARAMETER}, and its folder where it is not the usual "
                                  "one)", parameter="dataset")
        dataset = open_dataset(request.dataset, request.root)
        return dataset, split_items(dataset, split, *split_protocol(None))
    asked_for_other = request.root is not None or request.dataset not in (None, trained.dataset)
    name = request.dataset or trained.dataset
    root = request.root
    if root is None and name == trained.dataset:
        root = trained.root
    dataset = open_dataset(name, root)
    if not asked_for_other and trained.identity is not None and dataset.identity() != trained.identity:
        raise DatasetError(
            f"the {dataset.name} dataset at {dataset.root} is not the one this run was trained on "
            f"({len(dataset.items())} images now, {trained.images} then)",
            path=trained.record,
            fix=f"restore the dataset the run was trained on, or name it ({PARAMETER}, and its folder) to "
                "score the model on this one on purpose", parameter="dataset",
        )
    return dataset, split_items(dataset, split, *split_protocol(trained))


def measured_geometry(model: EmbeddingModel, dataset_name: str) -> EvalGeometry:
    """The geometry ``model`` is measured at on dataset ``dataset_name``: its own where it states one
    (:class:`~bgbias.methods.embedding_model.OwnGeometry`), else the dataset's evaluation geometry."""
    if isinstance(model, OwnGeometry):
        return model.eval_geometry(dataset_name)
    return eval_geometry(dataset_name)


@dataclass(frozen=True)
class ResolvedRequest:
    """An evaluation request made concrete once (its split chosen, and why), with what it measures: the
    dataset's images in query order, protocol, geometry, retrieval, masks folder and label
    (:func:`measured_label`)."""

    request: MeasureRequest
    split_reason: str
    dataset: Dataset
    items: list[Item]
    protocol: str
    fold: int
    geometry: EvalGeometry
    retrieval: Retrieval
    masks_dir: Path
    measured: str

    @property
    def split(self) -> str:
        split = self.request.split
        assert split is not None  # chosen by resolve
        return split


def resolve(model: EmbeddingModel, request: MeasureRequest) -> ResolvedRequest:
    """What ``request`` measures ``model`` on: the split :func:`chosen_split` picks of the dataset
    :func:`requested_split` opens, at the model's geometry, ranked by its own retrieval (an L2 shortlist
    re-ranked by it with ``request.shortlist``)."""
    split, reason = chosen_split(model, request)
    request = dataclasses.replace(request, split=split)
    if request.profile and request.worst_k < 1:
        raise OptionError(f"the worst case needs at least one background per query, not {request.worst_k}",
                          fix=f"pass {given(1)} or more", parameter="worst_k")
    if request.compare_masks is not None and not (request.corrupted or request.profile):
        raise OptionError("a second masks folder cuts out the corrupted repeats again, and none are scored",
                          fix=f"score the corrupted repeats too (--corrupted; corrupted=True in Python), or "
                              f"drop {PARAMETER}", parameter="compare_masks")
    dataset, items = requested_split(model, request)
    protocol, fold = split_protocol(model.trained_on())
    retrieval = with_shortlist(model.retrieval(), request.shortlist)
    return ResolvedRequest(request, reason, dataset, items, protocol, fold,
                           measured_geometry(model, dataset.name), retrieval, _masks_dir(dataset, request),
                           measured_label(dataset, request, retrieval))


def resolve_files(dataset: Dataset, request: MeasureRequest, protocol: str, fold: int) -> ResolvedRequest:
    """What ``request`` measures of one's own embeddings of ``dataset``'s sets: ``request.split`` under
    ``protocol`` and ``fold``, at the dataset's geometry, every set ranked by exact squared L2 and scored
    against the corrupted repeats the files were made for."""
    split = request.split
    assert split is not None  # the embeddings' split, always named
    if request.compare_masks is not None:
        raise OptionError("one's own embeddings are of sets cut out with one masks folder: the sets of a "
                          "second one must be embedded by the model",
                          fix=f"evaluate the model with {PARAMETER}", parameter="compare_masks")
    request, retrieval = dataclasses.replace(request, corrupted=True), ExactL2()
    return ResolvedRequest(request, f"{split}, the split the embeddings were made of, as given", dataset,
                           split_items(dataset, split, protocol, fold), protocol, fold,
                           eval_geometry(dataset.name), retrieval, _masks_dir(dataset, request),
                           measured_label(dataset, request, retrieval))


def _masks_dir(dataset: Dataset, request: MeasureRequest) -> Path:
    return Path(request.masks) if request.masks is not None else default_masks_dir(dataset)


def measured_label(dataset: Dataset, request: MeasureRequest, retrieval: Retrieval | None = None) -> str:
    """What an evaluation measured, as its report folder and table columns name it: the dataset's key, and the
    masks, pool, seed and approximate shortlist wherever they are not the defaults, so two measurements never
    write over each other's report."""
    parts = [dataset.key]
    if request.corrupted or request.profile:
        masks, backgrounds = request.masks, request.backgrounds
        if masks is not None and Path(masks).resolve() == default_ground_truth_dir(dataset).resolve():
            parts.append("exact-masks")
        elif masks is not None and Path(masks).resolve() != default_masks_dir(dataset).resolve():
            parts.append(located_key("masks", masks))
        if backgrounds is not None and Path(backgrounds).resolve() != backgrounds_root().resolve():
            parts.append(located_key("bg", backgrounds))
        if request.seed != 0:
            parts.append(f"seed{request.seed}")
    if retrieval is not None and retrieval.approximate:
        parts.append(f"shortlist{request.shortlist}")
    return "-".join(parts)
