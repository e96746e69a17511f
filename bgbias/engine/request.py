"""What to measure a model on: one request shared by ``bgbias eval``, ``explain`` and ``study``.

The command line, the study and library callers fill one :class:`MeasureRequest`; evaluation reads its data
and corrupted-set fields, explanation its data and attribution fields. :func:`requested_split` turns its data
fields into the images to score, defaulting to the dataset the model was trained on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bgbias.errors import PARAMETER, DatasetError, OptionError

if TYPE_CHECKING:
    from bgbias.data.geometry import EvalGeometry
    from bgbias.data.items import Dataset, Item
    from bgbias.methods.embedding_model import EmbeddingModel, TrainedOn

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
    profile: bool = False
    """Also the background-reliance profile (``bgbias.report.profile``); implies the corrupted repeats."""
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
    from bgbias.data.items import Dataset

    if request.split is not None:
        return request.split, f"{request.split}, as asked"
    name = request.dataset.name if isinstance(request.dataset, Dataset) else request.dataset
    if model.trained_on() is None and name in OWN_IMAGES:
        return "all", ("all, every image as query and gallery: the default for a model bgbias did not train, "
                       "on one's own images (the test split would score only the second half of the classes)")
    return "test", "test, the held-out classes (the default)"


def requested_split(model: EmbeddingModel, request: MeasureRequest) -> tuple[Dataset, list[Item]]:
    """The dataset and split items ``request`` names, under the split protocol and fold the model trained
    with (the paper's fixed split for a model trained elsewhere).

    Without ``request.dataset`` and ``request.root`` the dataset must still be the one the model was trained
    on (the image ids and labels its run recorded): a changed or replaced folder is a ``DatasetError``, never
    a score of another dataset. Naming a dataset or root is how a user asks for another one on purpose.
    """
    from bgbias.data.items import Dataset
    from bgbias.data.registry import open_dataset
    from bgbias.data.splits import split_items

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
    from bgbias.data.transforms import eval_geometry
    from bgbias.methods.embedding_model import OwnGeometry

    if isinstance(model, OwnGeometry):
        return model.eval_geometry(dataset_name)
    return eval_geometry(dataset_name)
