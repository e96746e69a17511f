"""One mask session per run, on an explicitly chosen backend and device, split into the three steps the
pipeline runs: ``prepare`` (each image, before the network), ``infer`` (the network, on a batch of at most
``batch`` images, at most ``streams`` batches at once) and ``finish`` (each image, after it). All three are
called from worker threads.

Two backends run the u2net family from the same pinned ONNX file (``bgbias.assets.store.u2net_model_path``;
a missing file raises the ``AssetError`` before any image is touched):

- ``torch``: bgbias's own PyTorch U²-Net with the file's weights (:mod:`bgbias.saliency.torch_session`),
  batched, on the CPU or CUDA, with the torch bgbias already needs: no other package on a GPU.
- ``onnxruntime``: the file itself in an onnxruntime session, one image per call (the file takes a batch of
  one), as rembg runs it; rembg's public API gives only its min-max-scaled mask, never the raw output the
  pipeline records, so bgbias opens the session itself. The other rembg models run through rembg's public
  ``new_session`` and ``predict``, the file handed over through ``U2NET_HOME`` so that rembg never downloads.

``auto`` picks by measurement per device (docs/benchmarks.md, *Mask backends*): ``torch`` on CUDA, batched;
``onnxruntime`` on the CPU, where it ran U²-Net about 1.1× as fast as the torch network on 2 cores and gives
rembg's masks byte for byte (torch there only where onnxruntime is not installed).
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
from bgbias.errors import PARAMETER, AssetError, OptionError
from bgbias.hardware import usable_cores
from bgbias.installation import import_onnxruntime
from bgbias.options import DEFAULT_MASK_MODEL
from bgbias.saliency.onnx_weights import load_u2net
from bgbias.saliency.torch_session import TorchU2netSession
from bgbias.saliency.u2net import SoftMask, u2net_input, u2net_mask
from bgbias.saliency.u2net_network import U2NET, U2NETP

U2NET_FAMILY = ("u2net", "u2netp", "u2net_human_seg", "silueta")
"""rembg models that share U²-Net's transforms (``bgbias.saliency.u2net``): the pipeline runs their network
itself, keeps the raw output range and flags likely-empty masks."""

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
"""Other local rembg models with one mask per image: they run whole through rembg's ``session.predict``.
(``sam`` needs prompts, ``u2net_cloth_seg`` gives three masks, ``*_custom`` need a path, and the remote models
send images away: none of them fits a dataset-wide mask run.)"""

MODELS = U2NET_FAMILY + PREDICT_MODELS

TORCH_MODELS = ("u2net", "u2netp", "u2net_human_seg")
"""The models the torch backend has a network for: the full U²-Net (``u2net`` and the same network trained on
people, ``u2net_human_seg``) and U²-Netp. ``silueta`` (another, smaller layout) and the rest run on
onnxruntime."""

BACKENDS = ("auto", "torch", "onnxruntime")
DEVICES = ("auto", "cpu", "cuda")
AMPS = ("auto", "off", "bf16", "fp16")
"""Autocast of the torch network, as ``--amp`` says it everywhere: ``off`` computes in float32, ``bf16`` and
``fp16`` autocast on CUDA; ``auto`` is ``off`` (mixed precision must first prove on a GPU that it keeps the
masks: docs/masks.md, *Backends*)."""
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
    backend: str
    """``torch`` or ``onnxruntime``."""
    provider: str
    """Where the network runs: onnxruntime's provider, or the torch device (``cpu``, ``cuda:0``)."""
    precision: str
    """What the network computes in: ``fp32``, ``bf16`` or ``fp16``."""
    batch: int
    """Images per network call."""
    streams: int
    """Network calls running at once."""
    threads: int
    """CPU threads of each of those calls."""
    versions: tuple[tuple[str, str], ...]
    """The packages that ran it and their versions (rembg, onnxruntime or torch)."""


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
    """Open ``model`` once for a whole run, as ``inference`` asks.

    ``backend``: ``torch`` (the u2net family but silueta), ``onnxruntime`` or ``auto``
    (:func:`chosen_backend`). ``device``: ``cpu``, ``cuda`` (an error unless the backend really runs there)
    or ``auto`` (CUDA where the backend can use it). ``amp``: ``off`` (``auto``: float32), or
    ``bf16``/``fp16`` autocast on CUDA with the torch backend. ``batch``: images per network call (default:
    1 on the CPU, where larger batches were slower, :data:`DEFAULT_CUDA_BATCH` on a GPU; onnxruntime's files
    take one). ``streams``: calls at once, each with ``threads`` CPU threads (defaults: one stream per core on
    the CPU, up to :data:`MAX_DEFAULT_STREAMS`, one on a GPU; the cores shared out among the streams).
    """
    check_model(model)
    inference = inference or Inference()
    if chosen_backend(model, inference) == "torch":
        return _torch_session(model, inference)
    return _onnxruntime_session(model, inference)


def chosen_backend(model: str, inference: Inference) -> str:
    """The backend that runs ``model`` as ``inference`` asks. An ``auto`` backend is torch on CUDA where it
    has the model's network (whole batches at once), and wherever mixed precision is asked for (only torch
    has it); on the CPU onnxruntime, which ran both U²-Nets 1.1× as fast as the torch network end to end on
    2 cores (docs/benchmarks.md, *Mask backends*), unless it is not installed; onnxruntime for every model
    torch has no network for."""
    backend = inference.backend
    if backend == "auto":
        if model not in TORCH_MODELS:
            return "onnxruntime"
        wants_torch = inference.amp in ("bf16", "fp16") or _on_cuda(inference.device)
        return "torch" if wants_torch or not _onnxruntime_installed() else "onnxruntime"
    if backend == "torch" and model not in TORCH_MODELS:
        raise OptionError(f"the torch backend has no network for {model}",
                          fix=f"use {PARAMETER}onnxruntime (or auto) for {model}; torch runs "
                              f"{', '.join(TORCH_MODELS)}", parameter="backend")
    return backend


def _on_cuda(device: str) -> bool:
    """Whether torch computes on CUDA for ``device`` (``auto``: where it sees a GPU)."""
    return device == "cuda" or (device == "auto" and torch.cuda.is_available())


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
        raise OptionError(f"{PARAMETER}{inference.amp} runs U²-Net on CUDA only; on the CPU it computes in "
                          "float32", fix=f"leave {PARAMETER} at auto (or off) on the CPU", parameter="amp")
    path = _model_path(model)
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
                          fix=f"install a CUDA build of torch (docs/install.md, GPU), or use {PARAMETER}cpu",
                          parameter="device")
    return torch.device("cuda", torch.cuda.current_device())


def _onnxruntime_session(model: str, inference: Inference) -> MaskSession:
    """As :func:`_torch_session`, the options are checked before the model file is looked for."""
    if inference.amp not in ("auto", "off"):
        raise OptionError(f"onnxruntime runs the model file in float32, without {PARAMETER}{inference.amp}",
                          fix=f"use the torch backend for bf16 or fp16, or leave {PARAMETER} at auto",
                          parameter="amp")
    if inference.batch not in (None, 1):
        raise OptionError(f"the {model} file takes one image per call on onnxruntime, not {inference.batch}",
                          fix=f"use {PARAMETER}torch to batch, or leave the batch size out",
                          parameter="backend")
    path = _model_path(model)
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
            session = _rembg_session(model, path.parent, options, providers)
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


def _model_path(model: str) -> Path:
    return u2net_model_path(model)


def _model_info(model: str, path: Path, **how: Any) -> ModelInfo:
    md5, sha256 = file_digests(path)
    return ModelInfo(name=model, file=path, bytes=path.stat().st_size, md5=md5, sha256=sha256, **how)


def _rembg_session(model: str, folder: Path, options: Any, providers: list[str]) -> Any:
    """rembg's session for ``model``, its file found in ``folder``."""
    with keeping_torch_threads():
        import rembg

    with _rembg_home(folder):
        return rembg.new_session(model, sess_opts=options, providers=providers)


REMBG_TESTED = "rembg>=2.0.86,<2.1"
"""The rembg releases whose internals :func:`rembg_onnx_session` is tested against (pyproject.toml's pin)."""


def rembg_onnx_session(rembg_session: Any) -> Any:
    """The onnxruntime session inside a rembg session, to read the provider it really runs on: rembg's
    public API does not say, so this reads its sessions' ``inner_session`` attribute, which it does not
    document. pyproject.toml pins rembg to the series tests/saliency/test_rembg_contract.py checks."""
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
    """Restore torch's intra-op thread count after the block. Importing rembg loads pymatting's cached numba
    functions, which start numba's OpenMP layer, and that resets OpenMP's thread count (torch's) to the
    machine's cores: a process that set fewer, or a study that trains after making masks in the same process,
    would then compute with another count than it asked for, and sums split over another number of threads
    round differently (the same seed, other digits)."""
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

    Measured on 2 CPU cores (benchmarks/masks_speed.py, raw ``session.run``): two concurrent runs of one
    thread each beat one run of two threads by about 5 % (u2netp 8.47 vs 8.04 images/s, u2net 3.48 vs 3.33),
    because a batch-1 320² network does not keep two intra-op threads busy between its many small operators.
    """
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
