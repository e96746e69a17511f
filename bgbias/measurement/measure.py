"""The paper's measurement in one pass down the layers: a request in, the typed report and its scores out
(docs/design.md, *The evaluation's data path*). :func:`measure_files` does the same with one's own
embeddings of the rendered sets in place of the model; writing the report is :mod:`bgbias.report.evaluate`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bgbias.data.eval_images import EvalImages
from bgbias.data.items import Dataset
from bgbias.data.memory import InMemoryImage
from bgbias.engine.device import loader_workers, model_memory_format, precision_name
from bgbias.engine.split_states import SplitStates
from bgbias.errors import PARAMETER, AssetError
from bgbias.host_memory import keep_freed_memory
from bgbias.measurement.embedding_files import EmbeddingFolder
from bgbias.measurement.record import EvaluationReport
from bgbias.measurement.request import MeasureRequest, resolve, resolve_files
from bgbias.measurement.scoring import score_sets
from bgbias.measurement.sets import CLEAN, evaluation_sets, layout_name, missing_manifests
from bgbias.measurement.summary import summarize
from bgbias.methods.embedding_model import EmbeddingModel
from bgbias.retrieval.metrics import RetrievalScores
from bgbias.retrieval.state import EMBEDDING


@dataclass(frozen=True)
class Measurement:
    """One evaluation measured: the typed report, the scores behind it (clean, each of the paper's corrupted
    repeats), the images in query order (ids, labels, and the clean and corrupted images a gallery shows),
    and how many sets were embedded now (the others came from the cache or from files)."""

    report: EvaluationReport
    clean: RetrievalScores
    corrupted: list[RetrievalScores]
    ids: list[str]
    labels: np.ndarray
    clean_images: Any
    corrupted_images: list[Any]
    embedded: int
    variants: dict[str, list[RetrievalScores]]
    """The profile's variant sets' scores by name (empty without the profile)."""


def measure(
    model: EmbeddingModel, request: MeasureRequest, *, log: Callable[[str], None] = print, cache: bool = True
) -> Measurement:
    """Score ``model`` on the split ``request`` names: clean, the corrupted repeats and the profile it asks
    for. Without ``cache`` no embedding is read from or written to the model's evaluation cache."""
    resolved = resolve(model, request)
    request, dataset, items = resolved.request, resolved.dataset, resolved.items
    sets = evaluation_sets(resolved)
    masks_in_memory = any(isinstance(item.saliency_mask, InMemoryImage) for item in items)
    states = SplitStates(model, dataset.name, items, resolved.geometry, batch_size=request.batch_size,
                         workers=request.workers, progress=request.progress, log=log,
                         on_disk=cache and not masks_in_memory)  # such masks have no file to key a cache by
    scored = score_sets(states, sets, resolved, log)
    trained_on = model.trained_on()
    source = {
        **model.describe(),
        "same_dataset_as_training": None if trained_on is None or trained_on.identity is None
        else trained_on.identity == dataset.identity(),
        "compute": {"device": str(model.device), "precision": precision_name(model.amp),
                    "memory_format": model_memory_format(model),
                    "loader_workers": loader_workers(request.workers, model.device),
                    "host_memory": keep_freed_memory()},
    }
    report = summarize(scored, sets, resolved, source)
    return Measurement(report, scored.clean, scored.corrupted, [item.id for item in items], states.labels,
                       EvalImages(items, resolved.geometry), [images for _, images in sets.corrupted],
                       states.embedded, scored.variants)


class FileStates:
    """The :class:`~bgbias.measurement.sets.SetStates` of an evaluation read from an embeddings folder: each
    set by the name its manifest gives it in the layout, the files read recorded in order."""

    def __init__(self, folder: EmbeddingFolder, labels: np.ndarray, names: dict[str, str],
                 log: Callable[[str], None]):
        self.folder = folder
        self.labels = labels
        self.names = names
        """Layout name of each set, by its manifest's sha256."""
        self.log = log
        self.files: list[dict[str, Any]] = []

    def clean(self) -> dict[str, np.ndarray]:
        return self._read(CLEAN, "clean")

    def state(self, images: Any, key: dict[str, Any], desc: str) -> dict[str, np.ndarray]:
        return self._read(self.names[key["manifest_sha256"]], desc)

    def _read(self, name: str, desc: str) -> dict[str, np.ndarray]:
        read = self.folder.read(name)
        self.files += [{"set": name, "path": path, "sha256": digest} for path, digest in read.sha256.items()]
        self.log(f"{desc}: embeddings from {read.files.data}")
        return {EMBEDDING: read.embeddings}


def measure_files(
    folder: Path,
    dataset: Dataset,
    request: MeasureRequest,
    *,
    protocol: str = "fixed",
    fold: int = 0,
    l2_normalize: bool = False,
    name: str | None = None,
    log: Callable[[str], None] = print,
) -> Measurement:
    """Score the embeddings in ``folder`` of ``request.split`` of ``dataset`` as :func:`measure` scores a
    model's; the manifests the sets were rendered from must exist (none is made here). ``l2_normalize`` scales
    every row to unit length first; ``name`` is the report's ``method`` (default the folder's name)."""
    resolved = resolve_files(dataset, request, protocol, fold)
    request, items = resolved.request, resolved.items
    missing = missing_manifests(resolved)
    if missing:
        raise AssetError(f"{len(missing)} manifests of the sets to score are missing (the embedded images "
                         "were rendered from them)", path=missing[0],
                         parameter="manifests",
                         fix=f"pass {PARAMETER}, the folder the sets were rendered from, or make and "
                             "render them with `bgbias corrupt --variant all --render DIR` and embed those "
                             "images")
    sets = evaluation_sets(resolved)
    labels = np.array([item.label for item in items], dtype=np.int64)
    manifests = [manifest for manifest, _ in sets.corrupted] + [images.manifest for images in sets.variants]
    names = {manifest.sha256: layout_name(manifest) for manifest in manifests}
    embeddings = EmbeddingFolder(folder, [CLEAN, *names.values()], [item.id for item in items], l2_normalize)
    states = FileStates(embeddings, labels, names, log)
    scored = score_sets(states, sets, resolved, log)
    source = {"method": name or folder.resolve().name, "bgaugment": None,
              "embeddings": {"folder": str(folder), "l2_normalized": l2_normalize, "files": states.files}}
    report = summarize(scored, sets, resolved, source)
    return Measurement(report, scored.clean, scored.corrupted, [item.id for item in items], labels,
                       EvalImages(items, resolved.geometry), [images for _, images in sets.corrupted], 0,
                       scored.variants)
