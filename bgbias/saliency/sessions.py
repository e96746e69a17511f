"""One rembg session per run, on an explicitly chosen onnxruntime provider, split into the three steps the
pipeline runs for each image: ``prepare`` (before the network), ``infer`` (the network, at most ``streams``
images at once) and ``finish`` (after it). All three are called from worker threads.

The model file comes from ``bgbias.assets.store.u2net_model_path``; a missing file raises the ``AssetError``
before any image is touched. The u2net family runs in bgbias's own onnxruntime session on that file: rembg's
public API gives only its min-max-scaled mask, never the network's raw output the pipeline records. The other
models run through rembg's public ``new_session`` and ``predict``, the file handed over through
``U2NET_HOME`` so that rembg never downloads anything.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Protocol

from PIL import Image

from bgbias.errors import AssetError, OptionError
from bgbias.hardware import usable_cores
from bgbias.installation import import_onnxruntime
from bgbias.options import DEFAULT_MASK_MODEL
from bgbias.saliency.u2net import SoftMask, u2net_input, u2net_mask

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

DEVICES = ("auto", "cpu", "cuda")
MAX_DEFAULT_STREAMS = 4
"""Each concurrent u2net run holds about 500 MB of activations (measured peak RSS: 1.1 GB with one run,
2.6 GB with four), so the default stops at four."""
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
    provider: str
    streams: int
    """How many images the pipeline runs through the network at once."""
    threads: int
    """onnxruntime intra-op threads of each of those runs."""
    rembg_version: str
    onnxruntime_version: str


class MaskSession(Protocol):
    """A saliency model split into steps, each safe to call from several threads at once."""

    info: ModelInfo

    def prepare(self, image: Image.Image) -> Any:
        """Everything that can run before the network, on a worker thread."""

    def infer(self, prepared: Any) -> Any:
        """The network itself (onnxruntime releases the GIL while it runs)."""

    def finish(self, raw: Any, size: tuple[int, int]) -> SoftMask:
        """Everything after the network: the 8-bit mask at ``size``, on a worker thread."""


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

    def infer(self, prepared: Any) -> Any:
        return self._session.run([self._output], {self._input: prepared})[0]

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

    def infer(self, prepared: Any) -> Any:
        return self._session.predict(prepared)[0]

    def finish(self, raw: Any, size: tuple[int, int]) -> SoftMask:
        mask = raw.convert("L")
        if mask.size != size:
            mask = mask.resize(size, Image.Resampling.LANCZOS)
        return SoftMask(mask, None, None)


def open_session(
    model: str = DEFAULT_MASK_MODEL,
    *,
    device: str = "auto",
    streams: int | None = None,
    threads: int | None = None,
) -> MaskSession:
    """Open ``model`` once for a whole run.

    ``device``: ``"cpu"``, ``"cuda"`` (an error unless onnxruntime offers CUDA and the session really runs on
    it) or ``"auto"`` (CUDA when offered, else CPU). ``streams``: images in the network at once, each run with
    ``threads`` onnxruntime intra-op threads (defaults: ``default_streams`` for the u2net family, whose
    memory per run is known, one stream for the others; ``default_threads``).
    """
    check_model(model)
    check_device(device)
    for name, value in (("streams", streams), ("threads", threads)):
        if value is not None and value < 1:
            raise OptionError(f"{name} must be at least 1, got {value}", fix=f"pass --{name} 1 or more")
    from bgbias.assets.store import u2net_model_path

    path = u2net_model_path(model)
    ort = import_onnxruntime()
    providers = choose_providers(device, ort.get_available_providers())
    streams = streams or (default_streams(providers[0]) if model in U2NET_FAMILY else 1)
    threads = threads or default_threads(streams)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidGraph, InvalidProtobuf, NoSuchFile

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
    if device == "cuda" and active != CUDA:
        raise OptionError(
            f"CUDA was asked for, but the onnxruntime session runs on {active}",
            fix="install CUDA and cuDNN versions that match onnxruntime-gpu, or use --device cpu",
        )
    md5, sha256 = file_digests(path)
    info = ModelInfo(
        name=model,
        file=path,
        bytes=path.stat().st_size,
        md5=md5,
        sha256=sha256,
        provider=active,
        streams=streams,
        threads=threads,
        rembg_version=_version("rembg"),
        onnxruntime_version=ort.__version__,
    )
    if model in U2NET_FAMILY:
        return U2netFamilySession(session, info)
    return PredictSession(session, info)


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
    import torch

    threads = torch.get_num_threads()
    try:
        yield
    finally:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


def check_model(model: str) -> None:
    if model not in MODELS:
        raise OptionError(f"unknown mask model {model!r}", fix=f"choose one of: {', '.join(MODELS)}")


def check_device(device: str) -> None:
    if device not in DEVICES:
        raise OptionError(f"unknown device {device!r}", fix=f"choose one of: {', '.join(DEVICES)}")


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
            fix="install onnxruntime-gpu instead of onnxruntime (`pip uninstall onnxruntime onnxruntime-gpu`,"
            " then `pip install onnxruntime-gpu`), or use --device cpu",
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
