"""``bgbias score --embeddings``: the report and profile of ``bgbias eval`` from a user's own embeddings of
the sets ``bgbias corrupt --render`` writes (docs/embeddings.md).

A team that embeds on its own GPUs or serving stack renders the sets, embeds them, and hands bgbias the files
(:mod:`bgbias.report.embedding_files`). The sets, their order, images and labels come from the dataset and
the manifests, exactly as an evaluation takes them (:mod:`bgbias.report.evaluation_sets`), and every set is
ranked by exact squared L2 and scored as ``bgbias eval`` scores it, so the same embeddings give the same
report, number for number. The report records that its embeddings came from files, and each file's sha256.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bgbias.errors import PARAMETER, AssetError, OptionError
from bgbias.installation import installation
from bgbias.report.embedding_files import EmbeddingFolder
from bgbias.report.evaluate import EvaluationResult, measured_label, write_evaluation_folder
from bgbias.report.evaluation_sets import CLEAN, evaluation_sets, layout_name, missing_manifests
from bgbias.retrieval.state import EMBEDDING

if TYPE_CHECKING:
    from bgbias.data.items import Dataset
    from bgbias.engine.request import MeasureRequest


class FileStates:
    """The :class:`~bgbias.report.evaluation_sets.SetStates` of an evaluation read from an embeddings folder:
    each set by the name its manifest gives it in the layout, the files read recorded in order."""

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


def score_embedding_folder(
    folder: str | Path,
    dataset: Dataset,
    request: MeasureRequest,
    *,
    protocol: str = "fixed",
    fold: int = 0,
    l2_normalize: bool = False,
    name: str | None = None,
    out: str | Path | None = None,
    log: Callable[[str], None] = print,
) -> EvaluationResult:
    """Score the embeddings in ``folder`` of ``request.split`` of ``dataset`` (under ``protocol`` and
    ``fold``) as ``bgbias eval`` scores a model's: clean, the ``request.repeats`` corrupted repeats and, with
    ``request.profile``, the background-reliance profile. The manifests must exist (those the sets were
    rendered from; none is made here). ``l2_normalize`` scales every row to unit length first (what bgbias
    does to a model's output by default); ``name`` is the report's ``method`` (default the folder's name);
    the report's files go to ``out`` (none without it)."""
    from bgbias.data.eval_images import EvalImages
    from bgbias.data.splits import split_items
    from bgbias.data.transforms import eval_geometry
    from bgbias.fileio import folder_lock
    from bgbias.report.evaluation import evaluation_record, summarize_evaluation
    from bgbias.report.profile import score_sets, summarize_profile
    from bgbias.retrieval.metrics import MAX_MEMORY
    from bgbias.retrieval.retrievers import ExactL2

    folder = Path(folder)
    request = replace(request, corrupted=True)  # the corrupted repeats are what the files are scored for
    items = split_items(dataset, request.split, protocol, fold)
    geometry = eval_geometry(dataset.name)
    missing = missing_manifests(dataset, request, protocol, fold, geometry)
    if missing:
        raise AssetError(f"{len(missing)} manifests of the sets to score are missing (the embedded images "
                         "were rendered from them)", path=missing[0],
                         parameter="manifests",
                         fix=f"pass {PARAMETER}, the folder the sets were rendered from, or make and "
                             "render them with `bgbias corrupt --variant all --render DIR` and embed those "
                             "images")
    sets = evaluation_sets(dataset, items, request, protocol, fold, geometry)
    labels = np.array([item.label for item in items], dtype=np.int64)
    manifests = [manifest for manifest, _ in sets.corrupted] + [images.manifest for images in sets.variants]
    names = {manifest.sha256: layout_name(manifest) for manifest in manifests}
    embeddings = EmbeddingFolder(folder, [CLEAN, *names.values()], [item.id for item in items], l2_normalize)
    if out is not None:
        _check_report_folder(Path(out))
    states = FileStates(embeddings, labels, names, log)
    retrieval = ExactL2()
    scored = score_sets(states, sets, retrieval, request, log, request.max_memory or MAX_MEMORY)
    clean, corrupted_scores = scored.clean, scored.corrupted

    meta = {
        "method": name or folder.resolve().name,
        "bgaugment": None,
        "dataset": dataset.name,
        "measured": measured_label(dataset, request, retrieval),
        "dataset_identity": dataset.identity(),
        "split": request.split,
        "split_reason": f"{request.split}, the split the embeddings were made of, as given",
        "protocol": protocol,
        "fold": fold,
        "geometry": geometry.as_dict(),
        "retrieval": retrieval.describe(),
        "embeddings": {"folder": str(folder), "l2_normalized": l2_normalize, "files": states.files},
        "corrupted_sets": sets.corrupted_meta(request),
        "installation": installation(),
    }
    ids = [item.id for item in items]
    report = summarize_evaluation(clean, corrupted_scores, labels, ids, meta,
                                  class_names=dataset.class_names(), empty_masks=sets.empty_masks)
    if request.profile:
        report["profile"] = summarize_profile(clean, corrupted_scores, scored.query_side, scored.variants,
                                              labels, sets.variants, sets.worst_case_manifests(request))
    record = evaluation_record(report)
    files: dict[str, Path] = {}
    if out is not None:
        with folder_lock(Path(out)):
            corrupted_images = [images for _, images in sets.corrupted]
            files = write_evaluation_folder(report, record, Path(out), clean, corrupted_scores, labels, ids,
                                            EvalImages(items, geometry), corrupted_images)
    return EvaluationResult(None if out is None else Path(out), record, files, clean, corrupted_scores, 0,
                            ids, labels)


def _check_report_folder(out: Path) -> None:
    """Refuse a report folder in or inside a run folder or a model's home: the report would read as theirs."""
    from bgbias.engine.external_model import folder_owner

    owner = folder_owner(out)
    if owner is not None:
        raise OptionError(f"the report folder is or lies inside {owner.describe()}: a report there would "
                          "read as that model's", path=out,
                          fix="write the report to a folder outside runs and model folders")
