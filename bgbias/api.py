"""The public API, re-exported lazily by ``bgbias`` (docs/api.md). Each function opens a dataset by name and
fills the request the command line fills, then calls the library function the command calls, so a result from
Python is the result of the command. Arguments are validated first (``@checked``) against the declarations
the command's options are typed from (``bgbias.options``): a wrong one is an ``OptionError`` naming it as
Python does (``repeats=5``), before any work.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
from pydantic import Field
from torch import nn

from bgbias.attribution.run import explain as explain_model
from bgbias.corrupted.manifest_store import manifests_in_memory
from bgbias.data.items import Dataset, default_masks_dir
from bgbias.data.memory import InMemoryImage
from bgbias.data.registry import open_dataset
from bgbias.data.table import ImageTable, image_table
from bgbias.engine.device import resolve_device
from bgbias.engine.external_model import external_model, load_external_model
from bgbias.engine.model_spec import network_from_callable, network_from_module
from bgbias.engine.trained import TrainedModel, is_run_path, load_trained
from bgbias.errors import ModelError, OptionError
from bgbias.leakage_meter.meter import DEFAULT_ENCODER, measure_leakage
from bgbias.measurement.record import evaluation_record, metadata_problem
from bgbias.measurement.request import MeasureRequest
from bgbias.measurement.summary import summarize_evaluation
from bgbias.methods.attribution import parse_attribution_options
from bgbias.methods.embedding_model import EmbeddingModel
from bgbias.model_audit.entries import check_labels, entries_of, read_list_file
from bgbias.model_audit.run import AuditSettings, audit_split, default_audit_folder, run_audit
from bgbias.models.model_input import ModelInput
from bgbias.options import (
    AMP,
    BATCH_SIZE,
    CHOSEN_SPLIT,
    COUNT,
    DEFAULT_MASK_MODEL,
    DEVICE,
    FILL,
    FLAG,
    FOLD,
    GALLERY_COUNT,
    LEAKAGE_SPLIT,
    LOG,
    MASK_BACKEND,
    MASK_DEVICE,
    MAX_MEMORY,
    MEMORY_FORMAT,
    OPTIONAL_TEXT,
    PATH,
    PATH_TEXT,
    PROTOCOL,
    REPEATS,
    SEED,
    SPLIT,
    TEXT,
    WORKERS,
    WORST_K,
    Code,
    Must,
    checked,
    instance_of,
)
from bgbias.report.evaluate import EvaluationResult, score_embedding_folder
from bgbias.report.evaluate import evaluate as evaluate_model
from bgbias.report.evaluation import write_evaluation_report
from bgbias.report.folder import EVAL_REPORT_FILES, refuse_model_folder, write_report_folder
from bgbias.report.paired import EvaluationComparison
from bgbias.report.paired import compare_evaluations as compare_folders
from bgbias.retrieval import metrics
from bgbias.retrieval.metrics import MAX_MEMORY as DEFAULT
from bgbias.saliency.on_the_fly import U2NetMasks, with_u2net_masks
from bgbias.saliency.pipeline import make_masks as write_masks
from bgbias.saliency.sessions import Inference
from bgbias.variants.render_variants import render_sets
from bgbias.variants.variant_manifests import make_sets

if TYPE_CHECKING:
    from bgbias.attribution.run import ExplainResult
    from bgbias.leakage_meter.result import DatasetLeakage
    from bgbias.model_audit.run import AuditResult
    from bgbias.saliency.pipeline import MaskRun

PathLike = str | os.PathLike[str]

MASKS = Annotated[instance_of(str | os.PathLike | U2NetMasks,
                              "a folder (str or os.PathLike) or a bgbias.U2NetMasks") | None,
                  Field(examples=["masks/bench"])]
"""``masks=``: a folder, or :class:`bgbias.U2NetMasks` to make them on the fly; None: the default folder."""
MODEL_INPUT = Annotated[instance_of(ModelInput, "a bgbias.ModelInput") | None,
                        Field(examples=[Code("bgbias.ModelInput()")])]
"""How an outside model reads its images; None: the defaults."""
EMBEDDING_MODEL = {"model_input": MODEL_INPUT, "device": DEVICE, "fingerprint": OPTIONAL_TEXT,
                   "trust_model": FLAG}
"""The arguments :func:`as_embedding_model` takes from every function that loads a model."""
COMPUTE = {"amp": AMP, "memory_format": MEMORY_FORMAT, "batch_size": BATCH_SIZE, "workers": WORKERS}


@checked(root=PATH, split=CHOSEN_SPLIT, corrupted=FLAG, repeats=REPEATS, seed=SEED, masks=MASKS,
         compare_masks=PATH, backgrounds=PATH, manifests=PATH, profile=FLAG, worst_k=WORST_K, out=PATH,
         **EMBEDDING_MODEL, **COMPUTE, max_memory=MAX_MEMORY, progress=FLAG, log=LOG)
def evaluate(
    model: Any,
    dataset: Any = None,
    *,
    root: PathLike | None = None,
    split: str | None = None,
    corrupted: bool = True,
    repeats: int = 5,
    seed: int = 0,
    masks: PathLike | U2NetMasks | None = None,
    compare_masks: PathLike | None = None,
    backgrounds: PathLike | None = None,
    manifests: PathLike | None = None,
    profile: bool = False,
    worst_k: int = 10,
    model_input: ModelInput | None = None,
    out: PathLike | None = None,
    device: str = "auto",
    fingerprint: str | None = None,
    trust_model: bool = False,
    amp: str | None = None,
    memory_format: str | None = None,
    batch_size: int = 64,
    workers: int | None = None,
    max_memory: int | None = None,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> EvaluationResult:
    """``bgbias eval``: clean and (with ``corrupted``) corrupted MAP@R, R-precision and P@1 of ``model`` on
    ``split`` of ``dataset``; ``result.report`` is the typed report the command prints, with ``profile`` the
    background-reliance profile too. docs/api.md gives what ``model`` and ``dataset`` may be and how the split
    is chosen (``report.split_reason``).

    Nothing is written unless asked: without ``out`` the result is all there is, and the corrupted sets are
    made in memory (kept for the next call in this process) unless ``manifests`` names their folder. With
    ``out``, the report, the cache and ``model.json`` go there (for a run, ``out`` must be its own folder). A
    TorchScript file is checked before it runs unless ``trust_model``; a factory is imported and called, so it
    runs as any Python does. ``max_memory``: bytes the scoring's neighbour lists may take at once (default 1
    GiB; the same scores in blocks). ``compare_masks``: a second masks folder, the corrupted repeats cut out
    with it too (``report.mask_sensitivity``). The other arguments are the command's options."""
    request = MeasureRequest(
        **_data_fields(dataset, root, masks), compare_masks=_path(compare_masks), split=split,
        corrupted=corrupted, repeats=repeats, seed=seed,
        backgrounds=_path(backgrounds), manifests=_path(manifests), profile=profile, worst_k=worst_k,
        batch_size=batch_size, workers=workers, max_memory=max_memory, progress=progress,
    )
    embedding_model = as_embedding_model(model, model_input, out=out, device=device, fingerprint=fingerprint,
                                         trust_model=trust_model, amp=amp, memory_format=memory_format)
    _check_run_out(embedding_model, out)
    with contextlib.ExitStack() as stack:
        if manifests is None:
            stack.enter_context(manifests_in_memory())
        return evaluate_model(embedding_model, request, log=log or (lambda _line: None),
                              write=out is not None)


def _data_fields(dataset: Any, root: PathLike | None, masks: Any) -> dict[str, Any]:
    """A request's ``dataset``, ``root`` and ``masks`` from the arguments: a name with its root and masks
    folder, or one's own images as a table (their masks made on the fly for :class:`bgbias.U2NetMasks`)."""
    images = _images(dataset, root)
    if isinstance(masks, U2NetMasks):
        if not isinstance(images, ImageTable):
            raise OptionError("masks=bgbias.U2NetMasks() makes masks for one's own images (rows, a table, a "
                              f"torch Dataset), not for the {images or 'run'!s} dataset",
                              fix="make a dataset's masks once with bgbias.make_masks(...) and pass masks= "
                                  "their folder")
        return {"dataset": with_u2net_masks(images, masks), "root": None, "masks": None}
    return {"dataset": images, "root": None if _is_data(dataset) else _path(root), "masks": _path(masks)}


def _images(dataset: Any, root: PathLike | None) -> Any:
    """A dataset's name as it is; one's own images (rows, a table, a torch Dataset) as a table dataset."""
    if isinstance(dataset, os.PathLike):
        raise OptionError(f"dataset={os.fspath(dataset)!r} is a path, not a dataset name or a table",
                          fix=f'pass dataset="folder", root={os.fspath(dataset)!r} for a folder of class '
                              "folders, or rows of (path, label[, mask])")
    return image_table(dataset, root) if _is_data(dataset) else dataset


def _opened(dataset: Any, root: PathLike | None) -> Dataset:
    """``dataset`` opened: by name (at ``root``), or one's own images as a table."""
    if dataset is None:
        raise OptionError("dataset= is required", fix='pass dataset="bench", or rows of (path, label)')
    images = _images(dataset, root)
    return open_dataset(images, root) if isinstance(images, str) else images


def _is_data(dataset: Any) -> bool:
    return dataset is not None and not isinstance(dataset, str | Dataset)


def _check_run_out(model: EmbeddingModel, out: PathLike | None) -> None:
    """A run's reports go into its own folder: ``out`` may only name it."""
    home = Path(model.home)
    if out is not None and isinstance(model, TrainedModel) and Path(out).resolve() != home.resolve():
        raise OptionError(f"out={os.fspath(out)!r} is not the run's folder {home}: a run's reports go into "
                          "its own folder", fix=f"pass out={os.fspath(home)!r} to write them there, or leave "
                                                "out= out to keep the results in memory")


@checked(root=PATH, split=SPLIT, masks=MASKS, attribution=Annotated[str, Field(examples=["smoothgrad"])],
         attribution_options=Annotated[dict[str, Any] | None, Must("a dict of the attribution's options"),
                                       Field(examples=[{"copies": 8}])],
         limit=COUNT, seed=SEED, batch_size=COUNT, gallery_count=GALLERY_COUNT, out=PATH, **EMBEDDING_MODEL,
         progress=FLAG, log=LOG)
def explain(
    model: Any,
    dataset: Any = None,
    *,
    root: PathLike | None = None,
    split: str = "test",
    masks: PathLike | U2NetMasks | None = None,
    attribution: str = "smoothgrad",
    attribution_options: dict[str, Any] | None = None,
    limit: int | None = None,
    seed: int = 0,
    batch_size: int | None = None,
    gallery_count: int = 16,
    model_input: ModelInput | None = None,
    out: PathLike | None = None,
    device: str = "auto",
    fingerprint: str | None = None,
    trust_model: bool = False,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> ExplainResult:
    """``bgbias explain``: ``attribution`` maps (``bgbias methods`` lists them and their options) and the
    paper's foreground score of every image of ``split`` (``limit``: that many, spread evenly), against its
    ground-truth mask where the dataset has one, else its saliency mask. ``model``, ``dataset``, ``root``,
    ``masks``, ``model_input`` and ``out`` are as for :func:`evaluate`: without ``out`` nothing is written
    and ``result.maps`` holds every map by image id (crop × crop float32: mind the memory on a large
    split), ``result.scores`` every score; with ``out`` the maps of a gallery, the scores and the summary go
    there, and an interrupted call resumes. ``attribution_options`` are the attribution's own
    (``{"copies": 8}``)."""
    options = parse_attribution_options(attribution, [f"{key}={value}" for key, value
                                                      in (attribution_options or {}).items()])
    request = MeasureRequest(
        **_data_fields(dataset, root, masks), split=split, limit=limit, attribution=attribution,
        attribution_options=options, attribution_seed=seed, batch_size=batch_size,
        gallery_count=gallery_count, progress=progress,
    )
    embedding_model = as_embedding_model(model, model_input, out=out, device=device, fingerprint=fingerprint,
                                         trust_model=trust_model)
    _check_run_out(embedding_model, out)
    return explain_model(embedding_model, request, log=log or (lambda _line: None), write=out is not None)


def as_embedding_model(
    model: Any,
    model_input: ModelInput | None = None,
    *,
    out: PathLike | None = None,
    device: str = "auto",
    fingerprint: str | None = None,
    trust_model: bool = False,
    amp: str | None = None,
    memory_format: str | None = None,
    args: dict[str, Any] | None = None,
    homes: PathLike | None = None,
) -> EmbeddingModel:
    """``model`` (see :func:`evaluate`) as an embedding model, in the precision and layout ``amp`` and
    ``memory_format`` choose (an embedding model given as one computes as it was built). ``args`` are a
    factory's keyword arguments; ``homes`` is the folder an outside model's default home goes under
    (default ``runs/external``; ignored where ``out`` names the home, and for a run, whose folder is its
    home)."""

    model_input = model_input or ModelInput()
    compute = {"amp": amp, "memory_format": memory_format}
    if isinstance(model, EmbeddingModel):
        given = [f"{name}={value!r}" for name, value in compute.items() if value is not None]
        if given:
            raise OptionError(f"{', '.join(given)} given with an embedding model ({type(model).__name__}), "
                              "which computes as it was built",
                              fix="leave them out, or pass the run folder or the model itself (or build it "
                                  "with bgbias.engine.trained.load_trained(run, amp=..., memory_format=...))")
        return model
    if isinstance(model, str | os.PathLike):
        if is_run_path(model):
            return load_trained(Path(model), device=device, **compute)
        return load_external_model(os.fspath(model), model_input, args=args, device=device, out=out,
                                   trust=trust_model, homes=homes, **compute)
    if isinstance(model, nn.Module):
        where = next((p.device for p in model.parameters()), None)
        network = network_from_module(model, type(model).__name__)
        return external_model(network, model_input, where or resolve_device(device), out, homes=homes,
                              **compute)
    if callable(model):
        if fingerprint is None:
            raise ModelError("a plain function has no weights bgbias could pin its embeddings by",
                             fix="pass fingerprint= with any text that changes whenever the function's "
                                 "embeddings would, or pass the torch.nn.Module itself")
        name = getattr(model, "__qualname__", type(model).__name__)
        network = network_from_callable(model, name, fingerprint)
        return external_model(network, model_input, resolve_device(device), out, homes=homes, **compute)
    raise ModelError(f"cannot score a {type(model).__name__}",
                     fix="pass a run folder, a model file or factory spec, a torch.nn.Module or a function")


@checked(ids=Annotated[Sequence[str] | None, Must("a list of strings, one per embedding"),
                       Field(examples=[["image-0", "image-1"]])],
         out=PATH, about=Annotated[dict[str, Any] | None, Must("a dict of the report's fields"),
                                   Field(examples=[{"method": "mine", "dataset": "toy"}])])
def evaluate_embeddings(
    clean: Any,
    labels: Any,
    corrupted: Sequence[Any] = (),
    *,
    ids: Sequence[str] | None = None,
    out: PathLike | None = None,
    about: dict[str, Any] | None = None,
) -> EvaluationResult:
    """The clean vs corrupted report of precomputed embeddings: ``clean`` (N, D) and one (N, D) array per
    corrupted repeat, of the same N images in the same order, with their ``labels`` (and ``ids`` for the
    report's image lists, default their positions). ``about`` goes into the report (name the method,
    dataset and split there; a key the report declares, such as ``seed``, must hold a value of its type);
    ``out`` is where its JSON, CSV and Markdown files go (none without it).
    Numpy arrays or torch tensors alike."""
    clean = _embeddings(clean, "clean")
    labels = _labels(labels, len(clean))
    if isinstance(corrupted, str) or not isinstance(corrupted, Sequence):
        raise OptionError(f"corrupted= must be a list of arrays (one per repeat), not "
                          f"{type(corrupted).__name__}",
                          fix="pass corrupted=[repeat_0, repeat_1, ...], each of the shape of clean")
    corrupted = [_embeddings(state, f"corrupted[{i}]", clean.shape) for i, state in enumerate(corrupted)]
    if ids is not None and len(ids) != len(clean):
        raise OptionError(f"ids= must be a list of {len(clean)} strings, one per embedding",
                          fix="pass ids=[...] naming each image, or leave it out for their positions")
    problem = metadata_problem(about or {})
    if problem is not None:
        field, wanted, found = problem
        raise OptionError(f"about= gives the report's field {field} {found}; it must be {wanted}",
                          fix=f"give {field} a value that is {wanted} in about=, or leave it out")
    if out is not None:
        _refuse_model_folder(out)
    clean_scores = metrics.score_embeddings(clean, labels)
    corrupted_scores = [metrics.score_embeddings(state, labels) for state in corrupted]
    ids = list(ids) if ids is not None else [str(i) for i in range(len(labels))]
    meta = {"method": "embeddings", "bgaugment": None, "dataset": "?", "split": "?", **(about or {})}
    report = summarize_evaluation(clean_scores, corrupted_scores, labels, ids, meta)
    record = evaluation_record(report)
    files = {} if out is None else write_report_folder(out, lambda stage: write_evaluation_report(
        record, stage, clean=clean_scores, corrupted=corrupted_scores, labels=labels, ids=ids),
        EVAL_REPORT_FILES)
    return EvaluationResult(_path(out), record, files, clean_scores, corrupted_scores, 0, ids, labels)


@checked(root=PATH, out=PATH, model=Annotated[str, Field(examples=[DEFAULT_MASK_MODEL])],
         backend=MASK_BACKEND, device=MASK_DEVICE, amp=AMP, batch_size=COUNT, progress=FLAG)
def make_masks(
    dataset: Any,
    root: PathLike | None = None,
    *,
    out: PathLike | None = None,
    model: str = DEFAULT_MASK_MODEL,
    backend: str = "auto",
    device: str = "auto",
    amp: str | None = "auto",
    batch_size: int | None = None,
    progress: bool = False,
) -> MaskRun:
    """``bgbias masks``: the U²-Net saliency mask of every image of ``dataset`` (a name, or one's own image
    files as :func:`evaluate` takes them) with ``model`` (default ``u2netp``) into ``out`` (default
    ``masks/<dataset key>`` for u2netp, where every command looks, ``masks/<dataset key>-<model>`` for another
    model), resumable; the run lists failures and quality. ``backend``, ``device``, ``amp`` and
    ``batch_size`` as ``bgbias masks`` takes them (docs/masks.md, *Backends*)."""
    opened = _opened(dataset, root)
    if any(isinstance(item.image, InMemoryImage) for item in opened.items()):
        raise OptionError("make_masks writes the masks of image files, and these images are a dataset's "
                          "samples in memory", fix="pass masks=bgbias.U2NetMasks() to bgbias.evaluate or "
                                                   "bgbias.explain: it makes them when they are used")
    folder = Path(out) if out is not None else default_masks_dir(opened, model)
    inference = Inference(backend=backend, device=device, amp=amp or "auto", batch=batch_size)
    return write_masks(opened.items(), folder, model=model, inference=inference, progress=progress)


@checked(root=PATH, split=SPLIT, repeats=REPEATS, seed=SEED,
         variants=Annotated[Sequence[str], Must("a list of set names: random-bg (the paper's), the profile's "
                                                "variants, or all"), Field(examples=[["random-bg"]])],
         backgrounds=PATH, out=PATH, render=PATH, masks=PATH)
def make_corrupted_sets(
    dataset: Any,
    root: PathLike | None = None,
    *,
    split: str = "test",
    repeats: int = 5,
    seed: int = 0,
    variants: Sequence[str] = ("random-bg",),
    backgrounds: PathLike | None = None,
    out: PathLike | None = None,
    render: PathLike | None = None,
    masks: PathLike | None = None,
) -> dict[str, list[Path]]:
    """``bgbias corrupt``: the manifests of each set named in ``variants`` (the paper's ``random-bg``, the
    profile's variants, or ``all``), by name, each in repeat order; the paper's ``repeats`` go to ``out``
    (default ``corrupted/<dataset key>/<split>/seed-<seed>``, the folder evaluation uses), each variant's to
    ``out/<variant>``. With ``render``, also their images (from the masks in ``masks``, default
    ``masks/<dataset key>``) and galleries in that folder. ``dataset`` is a name, or one's own images as
    :func:`evaluate` takes them."""
    opened = _opened(dataset, root)
    made = make_sets(opened, list(variants), split, repeats, seed, _path(backgrounds), _path(out))
    if render is not None:
        masks_dir = Path(masks) if masks is not None else default_masks_dir(opened)
        render_sets(opened, made, masks_dir, Path(render), _path(backgrounds))
    return made


@checked(max_memory=MAX_MEMORY)
def score_embeddings(embeddings: Any, labels: Any, *, max_memory: int | None = None) -> Any:
    """The metrics alone (MAP@R, R-precision, P@1, per query and as means) of ``embeddings`` (N, D), each
    image ranked against all the others, as pytorch-metric-learning's ``AccuracyCalculator`` defines
    them, tied neighbours at their expected value over every order (docs/design.md, *Ties*); numpy arrays
    or torch tensors alike. The queries are scored in blocks whose neighbour lists fit
    ``max_memory`` bytes (default 1 GiB), exact whatever the blocks: a class of 20,000 images among a million
    is scored in bounded memory."""
    embeddings = _embeddings(embeddings, "embeddings")
    return metrics.score_embeddings(embeddings, _labels(labels, len(embeddings)),
                                    max_memory=DEFAULT if max_memory is None else max_memory)


def _embeddings(values: Any, name: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """``values`` as an (N, D) array of finite real numbers (of ``shape`` where given), else an
    ``OptionError`` naming the argument."""
    try:
        array = _array(values)
    except Exception:  # whatever numpy makes of a ragged list or an object
        array = np.asarray([])
    fix = f"pass {name}= one embedding per row, an (images, dimensions) array of finite floats"
    if array.dtype.kind not in "fiu" or array.ndim != 2 or 0 in array.shape:
        raise OptionError(f"{name}= must be a 2-D array of real numbers with a row per image; got "
                          f"{type(values).__name__} of shape {array.shape} and dtype {array.dtype}", fix=fix)
    if shape is not None and array.shape != shape:
        raise OptionError(f"{name}= has shape {array.shape}, clean= {shape}: every repeat holds the same "
                          "images in the same order", fix=fix)
    if not np.isfinite(array).all():
        raise OptionError(f"{name}= holds NaN or infinite values", fix=fix)
    return array.astype(np.float32, copy=False)


def _labels(values: Any, count: int) -> np.ndarray:
    labels = _array(values)
    if labels.shape != (count,):
        raise OptionError(f"labels= must give one label per embedding: got shape {labels.shape} for {count} "
                          "embeddings", fix="pass labels= a 1-D array as long as the embeddings")
    return labels


def _refuse_model_folder(out: PathLike) -> None:
    """A report's ``out=`` may not be, or lie inside, a run folder or a model's home."""
    refuse_model_folder(Path(out), f"out={os.fspath(out)!r}", "a report there",
                        fix="pass out= a folder outside runs and model folders")


def _path(value: PathLike | None) -> Path | None:
    return None if value is None else Path(value)


def _array(values: Any) -> np.ndarray:
    """Numpy arrays as they are, torch tensors moved to the CPU."""
    return values.detach().cpu().numpy() if hasattr(values, "detach") else np.asarray(values)


@checked(embeddings=Annotated[PATH_TEXT, Field(examples=["embeddings"])], dataset=TEXT, root=PATH,
         split=SPLIT, protocol=PROTOCOL, fold=FOLD, repeats=REPEATS, seed=SEED, profile=FLAG,
         worst_k=WORST_K, masks=PATH, backgrounds=PATH, manifests=PATH, l2_normalize=FLAG,
         name=OPTIONAL_TEXT, max_memory=MAX_MEMORY, out=PATH, log=LOG)
def score(
    embeddings: PathLike,
    dataset: str,
    root: PathLike | None = None,
    *,
    split: str = "test",
    protocol: str = "fixed",
    fold: int = 0,
    repeats: int = 5,
    seed: int = 0,
    profile: bool = False,
    worst_k: int = 10,
    masks: PathLike | None = None,
    backgrounds: PathLike | None = None,
    manifests: PathLike | None = None,
    l2_normalize: bool = False,
    name: str | None = None,
    max_memory: int | None = None,
    out: PathLike | None = None,
    log: Callable[[str], None] | None = None,
) -> EvaluationResult:
    """``bgbias score --embeddings``: the report of :func:`evaluate` from one's own embeddings of the sets
    :func:`make_corrupted_sets` renders, read strictly from the folder ``embeddings`` (docs/embeddings.md).
    The sets come from ``split`` of ``dataset`` and the existing manifests in ``manifests`` (default as for
    :func:`evaluate`). ``l2_normalize`` scales each row to unit length first; ``name`` is the report's method
    (default the folder's name). No file is written unless ``out`` names the report's folder."""
    request = MeasureRequest(split=split, masks=_path(masks), repeats=repeats, seed=seed,
                             backgrounds=_path(backgrounds), manifests=_path(manifests), profile=profile,
                             worst_k=worst_k, max_memory=max_memory)
    return score_embedding_folder(Path(embeddings), open_dataset(dataset, root), request, protocol=protocol,
                                  fold=fold, l2_normalize=l2_normalize, name=name, out=_path(out),
                                  log=log or (lambda _line: None))


@checked(root=PATH, split=LEAKAGE_SPLIT, masks=MASKS, fill=FILL, seed=SEED, out=PATH, **EMBEDDING_MODEL,
         **COMPUTE, progress=FLAG)
def leakage(
    dataset: Any,
    root: PathLike | None = None,
    *,
    split: str = "test",
    masks: PathLike | U2NetMasks | None = None,
    fill: str = "inpainted",
    model: Any = None,
    model_input: ModelInput | None = None,
    seed: int = 0,
    out: PathLike | None = None,
    device: str = "auto",
    fingerprint: str | None = None,
    trust_model: bool = False,
    amp: str | None = None,
    memory_format: str | None = None,
    batch_size: int = 64,
    workers: int | None = None,
    progress: bool = False,
) -> DatasetLeakage:
    """``bgbias leakage``: how much of the class the background alone gives away in ``split`` of ``dataset``,
    before any model is trained on it (docs/leakage.md): background-only views (the hole filled by ``fill``)
    and foreground-only views embedded by ``model``, frozen (default the offline assets' ImageNet
    MobileNetV2), scored against chance by retrieval and a cross-validated probe. ``dataset``, ``root``,
    ``masks`` and ``model_input`` are as for :func:`evaluate`; ``seed`` fixes the probe's folds and the
    bootstrap. Nothing is written unless ``out`` names a folder for ``leakage.json``, ``leakage.md`` and
    ``leakage-classes.png``."""
    fields = _data_fields(dataset, root, masks)
    opened = _opened(fields["dataset"], fields["root"])
    if out is not None:
        _refuse_model_folder(out)
    encoder = as_embedding_model(DEFAULT_ENCODER if model is None else model, model_input, device=device,
                                 fingerprint=fingerprint, trust_model=trust_model, amp=amp,
                                 memory_format=memory_format)
    return measure_leakage(opened, encoder, split=split, masks_dir=fields["masks"], fill=fill, seed=seed,
                           batch_size=batch_size, workers=workers, progress=progress, out=_path(out))


EVALUATION_FOLDER = Annotated[PATH_TEXT, Field(examples=["runs/<run>/eval/bench-test"])]
"""An evaluation's report folder."""


@checked(first=EVALUATION_FOLDER, second=EVALUATION_FOLDER)
def compare_evaluations(first: PathLike, second: PathLike) -> EvaluationComparison:
    """Two evaluation folders of the same queries (``report.json`` and ``per_query.csv``, as ``bgbias eval``,
    ``evaluate(out=)`` and ``evaluate_embeddings(out=)`` write them) compared, ``second − first``: per metric
    the clean score, the corrupted score and the drop, each with its interval over the test queries (and the
    background draws, paired by draw where both scored the same corrupted sets) and its p-value. Nothing is
    evaluated again; two evaluations of other queries are an ``OptionError``."""
    return compare_folders(first, second)


@checked(models_file=PATH, root=PATH, split=CHOSEN_SPLIT, masks=MASKS, backgrounds=PATH, repeats=REPEATS,
         fill=FILL, seed=SEED, model_input=MODEL_INPUT, out=PATH, device=DEVICE, trust_model=FLAG, **COMPUTE,
         progress=FLAG, log=LOG)
def audit(
    dataset: Any,
    models: Any = (),
    *,
    models_file: PathLike | None = None,
    root: PathLike | None = None,
    split: str | None = None,
    masks: PathLike | None = None,
    backgrounds: PathLike | None = None,
    repeats: int = 5,
    fill: str = "inpainted",
    seed: int = 0,
    model_input: ModelInput | None = None,
    out: PathLike | None = None,
    device: str = "auto",
    trust_model: bool = False,
    amp: str | None = None,
    memory_format: str | None = None,
    batch_size: int = 64,
    workers: int | None = None,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> AuditResult:
    """``bgbias audit``: several models scored side by side on ``split`` of ``dataset`` (docs/audit.md; by
    default chosen as :func:`evaluate` chooses it), ranked by corrupted MAP@R in one page. ``models`` are
    specs (as ``--model`` takes them), models in memory, or a mapping of label to either; ``models_file`` adds
    the lines of a list file (a factory in it only with ``trust_model``).

    Unlike :func:`evaluate`, an audit's job is files, and it resumes: its page and a folder per model go to
    ``out`` (default ``runs/audit/<dataset key>-<split>``), and a second call reuses every finished model. A
    model that fails is recorded with its error while the others go on (``result.failed``)."""
    entries = entries_of(models) + (read_list_file(models_file, trust=trust_model) if models_file is not None
                                    else [])
    check_labels(entries)
    fields = _data_fields(dataset, root, masks)
    opened = _opened(fields["dataset"], fields["root"])
    split, split_reason = audit_split(opened, entries, split)
    folder = Path(out) if out is not None else default_audit_folder(opened, split)
    settings = AuditSettings(split=split, split_reason=split_reason, repeats=repeats, seed=seed, fill=fill,
                             masks=fields["masks"],
                             backgrounds=_path(backgrounds), batch_size=batch_size, workers=workers,
                             progress=progress)

    def load(entry: Any, home: Path) -> EmbeddingModel:
        return as_embedding_model(entry.model, model_input, device=device, trust_model=trust_model, amp=amp,
                                  memory_format=memory_format, args=entry.args, homes=home)

    return run_audit(opened, entries, load, settings, folder, log=log or (lambda _line: None))
