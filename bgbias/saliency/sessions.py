"""One mask session per run, on an explicitly chosen backend and device, split into ``prepare`` (each image,
on a worker thread), ``infer`` (the network on a batch) and ``finish`` (each image, on a worker thread).

``torch`` runs bgbias's own U²-Net with the pinned ONNX file's weights; ``onnxruntime`` runs the file itself,
as rembg does (rembg's API hides the raw output the records keep); other rembg models run through rembg's
``new_session``/``predict``. How ``auto`` picks, and why: docs/masks.md, *Backends*.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Protocol

import torch
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidGraph, InvalidProtobuf, NoSuchFile
from PIL import Image

from bgbias.assets.store import u2net_model_path
from bgbias.errors import PARAMETER, AssetError, OptionError, given
from bgbias.hardware import usable_cores
from bgbias.host_memory import keep_freed_memory
from bgbias.installation import import_onnxruntime
from bgbias.options import DEFAULT_MASK_MODEL
from bgbias.saliency.onnx_weights import load_u2net
from bgbias.saliency.torch_session import TorchU2netSession
from bgbias.saliency.u2net import SoftMask, u2net_input, u2net_mask
from bgbias.saliency.u2net_network import U2NET, U2NETP

U2NET_FAMILY = ("u2net", "u2netp", "u2net_human_seg", "silueta")
"""rembg models with U²-Net's transforms: the pipeline runs their network itself and keeps the raw range."""

PREDICT_MODELS = (
    "isnet-general-use",
    "isnet-anime",
    "birefnet-general",
    "birefnet-general-lite",
    "birefnet-general-fp16",
    "birefnet-portrait",
    "birefnet-dis",
    "birefnet-hrsod",
    "birefnet-cod",
    "birefnet-massive",
    "bria-rmbg",
)
"""Other local rembg models with one mask per image, run whole by rembg's ``predict`` (``sam`` needs prompts,
``u2net_cloth_seg`` gives three masks, ``*_custom`` need a path, remote models send images away)."""

MODELS = U2NET_FAMILY + PREDICT_MODELS

TORCH_MODELS = ("u2net", "u2netp", "u2net_human_seg")
"""The models the torch backend has a network for (``silueta`` has another layout: onnxruntime only)."""

BACKENDS = ("auto", "torch", "onnxruntime")
DEVICES = ("auto", "cpu", "cuda")
AMPS = ("auto", "off", "bf16", "fp16")
"""``--amp``: ``off`` computes in float32, ``bf16``/``fp16`` autocast on CUDA, ``auto`` is ``off``
(docs/masks.md, *Backends*)."""
PRECISION = {"off": "fp32", "bf16": "bf16", "fp16": "fp16"}
"""The precision a manifest records for each ``--amp``."""
AMP_OF = {precision: amp for amp, precision in PRECISION.items()}
"""The ``--amp`` that computes in each precision a manifest records."""

MAX_DEFAULT_STREAMS = 4
"""Each concurrent u2net run holds about 500 MB of activations (measured peak RSS: 1.1 GB with one run,
2.6 GB with four), so the default stops at four."""
DEFAULT_CUDA_BATCH = 32
"""Images per network call on a GPU: at 320² U²-Net holds about 0.2 GB of activations per image in float32,
so a batch of 32 fits any CUDA card bgbias trains on, with enough work per call to keep it busy."""
CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"


@dataclass(frozen=True)
class ModelInfo:
    """What produced a set of masks: recorded in the manifest, and compared on resume."""

    name: str
    file: Path
    bytes: int
    md5: str
    sha256: str
    backend: str  # torch or onnxruntime
    provider: str  # onnxruntime's provider, or the torch device (cpu, cuda:0)
    precision: str  # fp32, bf16 or fp16
    batch: int  # images per network call
    streams: int  # network calls at once
    threads: int  # CPU threads of each call
    versions: tuple[tuple[str, str], ...]  # the packages that ran it (rembg, onnxruntime or torch)


class MaskSession(Protocol):
    """A saliency model split into steps, each safe to call from several threads at once."""

    info: ModelInfo

    def prepare(self, image: Image.Image) -> Any:
        """Everything that can run before the network for one image, on a worker thread."""

    def running(self) -> contextlib.AbstractContextManager:
        """Held around a whole run: what the backend sets for it (and restores after)."""

    def infer(self, batch: Sequence[Any]) -> list[Any]:
        """The network on at most ``info.batch`` prepared images (it releases the GIL while it runs)."""

    def finish(self, raw: Any, size: tuple[int, int]) -> SoftMask:
        """Everything after the network for one image: the 8-bit mask at ``size``, on a worker thread."""


class U2netFamilySession:
    """A u2net-family model: an onnxruntime session on its file, made as rembg makes its own (same file,
    options and providers), with bgbias's own (rembg-identical) transforms."""

    def __init__(self, onnx_session: Any, info: ModelInfo):
        self._session = onnx_session
        self._input = self._session.get_inputs()[0].name
        self._output = self._session.get_outputs()[0].name
        self.info = info

    def prepare(self, image: Image.Image) -> Any:
        return u2net_input(image)

    def running(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def infer(self, batch: Sequence[Any]) -> list[Any]:
        return [self._session.run([self._output], {self._input: prepared})[0] for prepared in batch]

    def finish(self, raw: Any, size: tuple[int, int]) -> SoftMask:
        return u2net_mask(raw, size)


class PredictSession:
    """Any other rembg model, run whole by rembg's ``predict`` in ``infer`` (its transforms differ per model,
    so the raw range is not available)."""

    def __init__(self, rembg_session: Any, info: ModelInfo):
        self._session = rembg_session
        self.info = info

    def prepare(self, image: Image.Image) -> Any:
        return image

    def running(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def infer(self, batch: Sequence[Any]) -> list[Any]:
        return [self._session.predict(prepared)[0] for prepared in batch]

    def finish(self, raw: Any, size: tuple[int, int]) -> SoftMask:
        mask = raw.convert("L")
        if mask.size != size:
            mask = mask.resize(size, Image.Resampling.LANCZOS)
        return SoftMask(mask, None, None)


@dataclass(frozen=True)
class Inference:
    """How a run asks its model to be run; ``auto`` and ``None`` are decided by :func:`open_session`."""

    backend: str = "auto"
    device: str = "auto"
    amp: str = "auto"
    batch: int | None = None
    streams: int | None = None
    threads: int | None = None

    def __post_init__(self) -> None:
        check_choice("backend", self.backend, BACKENDS)
        check_device(self.device)
        check_choice("amp", self.amp, AMPS)
        for name, value in (("batch-size", self.batch), ("streams", self.streams), ("threads", self.threads)):
            if value is not None and value < 1:
                raise OptionError(f"{name} must be at least 1, got {value}", fix=f"pass --{name} 1 or more")


def open_session(model: str = DEFAULT_MASK_MODEL, inference: Inference | None = None) -> MaskSession:
    """Open ``model`` once for a whole run, as ``inference`` asks (backend by :func:`chosen_backend`).

    Defaults: a batch of 1 on the CPU (larger ones were slower), :data:`DEFAULT_CUDA_BATCH` on a GPU; one
    stream per core on the CPU (up to :data:`MAX_DEFAULT_STREAMS`), one on a GPU; the cores shared out among
    the streams. ``cuda`` is an error unless the backend really runs there. Host memory is kept for reuse
    (:mod:`bgbias.host_memory`): the torch network's buffers, and every image's decode and shrink.
    """
    check_model(model)
    keep_freed_memory()
    inference = inference or Inference()
    if chosen_backend(model, inference) == "torch":
        return _torch_session(model, inference)
    return _onnxruntime_session(model, inference)


def chosen_backend(model: str, inference: Inference) -> str:
    """The backend that runs ``model`` as ``inference`` asks. ``auto``: torch on CUDA or for mixed precision
    (where it has the model's network), else onnxruntime where installed: on 2 cores neither is faster for
    both models, and onnxruntime's masks are rembg's byte for byte (docs/benchmarks.md, *Mask backends*)."""
    backend = inference.backend
    if backend == "auto":
        if model not in TORCH_MODELS:
            return "onnxruntime"
        on_cuda = inference.device == "cuda" or (inference.device == "auto" and torch.cuda.is_available())
        wants_torch = inference.amp in ("bf16", "fp16") or on_cuda
        return "torch" if wants_torch or not _onnxruntime_installed() else "onnxruntime"
    if backend == "torch" and model not in TORCH_MODELS:
        raise OptionError(f"the torch backend has no network for {model}",
                          fix=f"use {given('onnxruntime')} (or auto) for {model}; torch runs "
                              f"{', '.join(TORCH_MODELS)}", parameter="backend")
    return backend


def _onnxruntime_installed() -> bool:
    try:
        return importlib.util.find_spec("onnxruntime") is not None
    except ValueError:  # a module object without a spec in its place
        return False


def _torch_session(model: str, inference: Inference) -> MaskSession:
    """The options are checked before the model file is looked for: a user without the file learns of a
    refused combination before fetching it, not after."""

    device = torch_device(inference.device)
    precision = PRECISION["off" if inference.amp == "auto" else inference.amp]
    if precision != "fp32" and device.type != "cuda":
        raise OptionError(f"{given(inference.amp)} runs U²-Net on CUDA only; on the CPU it computes in "
                          "float32", fix=f"leave {PARAMETER} at auto (or off) on the CPU", parameter="amp")
    path = u2net_model_path(model)
    fix = f"delete the file and fetch it again: `bgbias assets fetch {model} --force`"
    network = load_u2net(path, U2NETP if model == "u2netp" else U2NET, fix=fix)
    on_gpu = device.type == "cuda"
    streams = inference.streams or (1 if on_gpu else min(usable_cores(), MAX_DEFAULT_STREAMS))
    info = _model_info(
        model, path, backend="torch",
        provider=str(device) if not on_gpu else f"{device} ({torch.cuda.get_device_name(device)})",
        precision=precision,
        batch=inference.batch or (DEFAULT_CUDA_BATCH if on_gpu else 1),
        streams=streams,
        threads=inference.threads or default_threads(streams),
        versions=(("torch", torch.__version__),),
    )
    return TorchU2netSession(network, device, precision, info)


def torch_device(device: str):
    """The torch device for ``device``: ``auto`` is the current CUDA device when torch sees one, else the CPU;
    ``cuda`` without one is an error that says what torch sees."""
    check_device(device)
    if device == "cpu" or (device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise OptionError(f"CUDA was asked for, but this torch ({torch.__version__}) sees no CUDA device",
                          fix=f"install a CUDA build of torch (docs/install.md, GPU), or use {given('cpu')}",
                          parameter="device")
    return torch.device("cuda", torch.cuda.current_device())


def _onnxruntime_session(model: str, inference: Inference) -> MaskSession:
    """As :func:`_torch_session`, the options are checked before the model file is looked for."""
    if inference.amp not in ("auto", "off"):
        raise OptionError(f"onnxruntime runs the model file in float32, without {given(inference.amp)}",
                          fix=f"use the torch backend for bf16 or fp16, or leave {PARAMETER} at auto",
                          parameter="amp")
    if inference.batch not in (None, 1):
        raise OptionError(f"the {model} file takes one image per call on onnxruntime, not {inference.batch}",
                          fix=f"use {given('torch')} to batch, or leave the batch size out",
                          parameter="backend")
    path = u2net_model_path(model)
    ort = import_onnxruntime()
    providers = choose_providers(inference.device, ort.get_available_providers())
    streams = inference.streams or (default_streams(providers[0]) if model in U2NET_FAMILY else 1)
    threads = inference.threads or default_threads(streams)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1

    try:
        if model in U2NET_FAMILY:
            session = onnx_session = ort.InferenceSession(str(path), options, providers=providers)
        else:
            with keeping_torch_threads():
                import rembg
            with _rembg_home(path.parent):
                session = rembg.new_session(model, sess_opts=options, providers=providers)
            onnx_session = rembg_onnx_session(session)
    except (Fail, InvalidGraph, InvalidProtobuf, NoSuchFile) as exc:
        raise AssetError(
            f"onnxruntime cannot load the {model} model ({exc})",
            path=path,
            fix=f"delete the file and fetch it again: `bgbias assets fetch {model} --force`",
        ) from exc
    active = onnx_session.get_providers()[0]
    if inference.device == "cuda" and active != CUDA:
        raise OptionError(
            f"CUDA was asked for, but the onnxruntime session runs on {active}",
            fix="install CUDA and cuDNN versions that match onnxruntime-gpu, use --backend torch, or use "
                "--device cpu",
        )
    info = _model_info(model, path, backend="onnxruntime", provider=active, precision="fp32", batch=1,
                       streams=streams, threads=threads,
                       versions=(("rembg", _version("rembg")), ("onnxruntime", ort.__version__)))
    if model in U2NET_FAMILY:
        return U2netFamilySession(session, info)
    return PredictSession(session, info)


def _model_info(model: str, path: Path, **how: Any) -> ModelInfo:
    md5, sha256 = file_digests(path)
    return ModelInfo(name=model, file=path, bytes=path.stat().st_size, md5=md5, sha256=sha256, **how)


REMBG_TESTED = "rembg>=2.0.86,<2.1"
"""The rembg releases whose internals :func:`rembg_onnx_session` is tested against (pyproject.toml's pin)."""


def rembg_onnx_session(rembg_session: Any) -> Any:
    """The onnxruntime session inside a rembg session (its undocumented ``inner_session``), to read the
    provider it really runs on; tests/saliency/test_rembg_contract.py checks the pinned series keeps it."""
    onnx_session = getattr(rembg_session, "inner_session", None)
    if not callable(getattr(onnx_session, "get_providers", None)):
        raise AssetError(
            f"rembg {_version('rembg')} keeps no onnxruntime session where bgbias reads it "
            "(the `inner_session` of its sessions)",
            fix=f"install a rembg bgbias is tested with: pip install '{REMBG_TESTED}'",
        )
    return onnx_session


@contextlib.contextmanager
def keeping_torch_threads() -> Iterator[None]:
    """Restore torch's intra-op thread count after the block: importing rembg starts numba's OpenMP layer,
    which resets it to the machine's cores, and sums split over another number of threads round differently
    (the same seed, other digits)."""
    threads = torch.get_num_threads()
    try:
        yield
    finally:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


def check_model(model: str) -> None:
    check_choice("mask model", model, MODELS)


def check_device(device: str) -> None:
    check_choice("device", device, DEVICES)


def check_choice(what: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise OptionError(f"unknown {what} {value!r}", fix=f"choose one of: {', '.join(choices)}")


def choose_providers(device: str, available: Sequence[str]) -> list[str]:
    """onnxruntime providers for ``device``, given the ones this onnxruntime build offers."""
    check_device(device)
    if device == "cpu":
        return [CPU]
    if CUDA in available:
        return [CUDA, CPU]
    if device == "cuda":
        raise OptionError(
            f"CUDA was asked for, but onnxruntime offers only {', '.join(available)}",
            fix="use --backend torch (it runs on CUDA with the torch bgbias needs anyway), install "
            "onnxruntime-gpu instead of onnxruntime, or use --device cpu",
        )
    return [CPU]


def default_streams(provider: str) -> int:
    """Images in the network at once: one per core on CPU (at most ``MAX_DEFAULT_STREAMS``), one on a GPU.
    Two one-thread runs beat one two-thread run on 2 cores (docs/benchmarks.md, *Mask backends*)."""
    if provider != CPU:
        return 1
    return min(usable_cores(), MAX_DEFAULT_STREAMS)


def default_threads(streams: int) -> int:
    """onnxruntime intra-op threads per stream: the cores shared out among the streams."""
    return max(1, usable_cores() // streams)


def file_digests(path: Path) -> tuple[str, str]:
    """(md5, sha256) of a file in one pass: md5 is rembg's own pin, sha256 the project's."""
    md5, sha256 = hashlib.md5(), hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            md5.update(chunk)
            sha256.update(chunk)
    return md5.hexdigest(), sha256.hexdigest()


@contextlib.contextmanager
def _rembg_home(folder: Path) -> Iterator[None]:
    """Point rembg's ``U2NET_HOME`` at ``folder`` while a session is created, then restore it."""
    previous = os.environ.get("U2NET_HOME")
    os.environ["U2NET_HOME"] = str(folder)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("U2NET_HOME", None)
        else:
            os.environ["U2NET_HOME"] = previous


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"
