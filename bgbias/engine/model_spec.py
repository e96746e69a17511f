"""What ``--model SPEC`` names, loaded without unpickling anything: a TorchScript file, an ONNX file, or a
Python factory ``package.module:callable`` (with keyword arguments) that returns a ``torch.nn.Module``.

A file's kind is read from its bytes, not its name. A TorchScript archive's code is a program, so it is
checked before it is loaded and before it runs (:mod:`bgbias.engine.torchscript_guard`) unless ``trust``; a
``torch.save`` pickle is refused (unpickling can run any code). Each network carries a digest that pins it,
which the evaluation cache is keyed by.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import warnings
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bgbias.assets.digest import sha256_file
from bgbias.engine.method_model import json_digest, weights_sha256
from bgbias.engine.torchscript_guard import check_archive, check_operators
from bgbias.errors import PARAMETER, ModelError, given
from bgbias.installation import import_onnxruntime
from bgbias.methods.attribution import parse_option_value

_FACTORY = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")

TO_TORCHSCRIPT = (
    "torch.jit.save(torch.jit.script(torch.load('{path}', weights_only=False)), 'model.pt') where you trust "
    "the file (torch.jit.trace(model, example_images) where scripting fails), then pass --model model.pt; or "
    "pass --model package.module:factory, a function that builds the model and loads its state dict"
)


@dataclass(frozen=True)
class Network:
    """A loaded model: ``call`` maps a (B, 3, H, W) float batch of network input to its output (a tensor,
    or a dict or tuple of them). ``kind``: ``torchscript``, ``onnx``, ``factory``, ``module`` or ``callable``
    (the last two in memory); ``spec``: the file's absolute path, the factory, or ``<in memory>``."""

    kind: str
    name: str
    spec: str
    sha256: str
    call: Callable[[torch.Tensor], Any]
    args: dict[str, Any] = field(default_factory=dict)
    differentiable: bool = True


def is_factory(spec: str) -> bool:
    """Whether ``spec`` names a factory (``package.module:callable``) rather than a file."""
    return _FACTORY.fullmatch(spec) is not None and not Path(spec).exists()


def load_network(spec: str, args: Mapping[str, Any], device: torch.device, *, trust: bool = False) -> Network:
    """The network ``spec`` names on ``device``: a factory called with ``args``, else a checked file."""
    if is_factory(spec):
        return load_factory(spec, args, device)
    path = Path(spec)
    if not path.is_file():
        raise ModelError("there is no such model file, and it is not a factory package.module:callable",
                         path=path, fix="pass a TorchScript (.pt) or ONNX (.onnx) file, or a factory such as "
                                        "torchvision.models:resnet50")
    if args:
        raise ModelError(f"keyword arguments ({', '.join(sorted(args))}) given for a model file, which takes "
                         "none", path=path, fix="leave them out, or pass a factory package.module:callable")
    kind = file_kind(path)
    return load_torchscript(path, device, trust=trust) if kind == "torchscript" else load_onnx(path, device)


def file_kind(path: Path) -> str:
    """``torchscript`` or ``onnx`` (unchecked until onnxruntime reads it); a pickle is a ``ModelError``."""
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as archive:
                parts = [name.split("/") for name in archive.namelist()]
        except (zipfile.BadZipFile, OSError) as err:
            raise ModelError(f"the model file is a damaged zip archive ({err})", path=path,
                             fix="save the model again") from None
        if any(len(p) > 2 and p[1] == "code" for p in parts):
            return "torchscript"
        if any(p[-1] == "data.pkl" for p in parts):
            raise _pickle_error(path)
        raise ModelError("the model file is a zip archive but not a TorchScript one", path=path,
                         fix="save the model with torch.jit.save, or export it to ONNX")
    with open(path, "rb") as handle:
        if handle.read(1) == b"\x80":  # pickle's PROTO opcode: torch.save's format before zip archives
            raise _pickle_error(path)
    return "onnx"


def _pickle_error(path: Path) -> ModelError:
    run = path.parent.parent
    fix = (f"it is a checkpoint of the bgbias run {run}: score the run itself ({run})"
           if path.parent.name == "checkpoints" and (run / "config.json").is_file()
           else TO_TORCHSCRIPT.format(path=path))
    return ModelError("this is a pickled torch.save file, and unpickling it can run any code it holds, so "
                      "bgbias does not load it", path=path, fix=fix)


def load_torchscript(path: Path, device: torch.device, *, trust: bool = False) -> Network:
    """A TorchScript archive in eval mode on ``device``, checked unless ``trust``."""
    if not trust:
        check_archive(path)
    try:
        with warnings.catch_warnings():
            # torch 2.9+ calls TorchScript deprecated; it still loads, and the file is what the user has.
            warnings.simplefilter("ignore", DeprecationWarning)
            module = torch.jit.load(str(path), map_location=device)
    except (RuntimeError, ValueError) as err:
        raise ModelError(f"torch cannot load this TorchScript archive: {str(err).splitlines()[0]}", path=path,
                         fix="save it again with torch.jit.save, with a torch no newer than this one "
                             f"({torch.__version__})") from None
    if not trust:
        check_operators(module, path)
    return Network("torchscript", path.name, str(path.resolve()), sha256_file(path), module.eval())


def load_onnx(path: Path, device: torch.device) -> Network:
    """An ONNX model in an onnxruntime session (CUDA's provider for a CUDA ``device``)."""
    onnxruntime = import_onnxruntime()

    providers = ["CPUExecutionProvider"]
    if device.type == "cuda":
        if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
            raise ModelError("this onnxruntime cannot run on CUDA", path=path,
                             fix="install onnxruntime-gpu in place of onnxruntime (docs/install.md, GPU "
                                 f"builds), or pass {given('cpu')}", parameter="device")
        providers.insert(0, "CUDAExecutionProvider")
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    try:
        session = onnxruntime.InferenceSession(str(path), options, providers=providers)
    except Exception as err:  # onnxruntime raises its own exception types for unreadable models
        raise ModelError(f"the model file is neither TorchScript nor ONNX (onnxruntime: "
                         f"{str(err).splitlines()[0]})", path=path,
                         fix="pass a file saved with torch.jit.save or exported to ONNX (torch.onnx.export), "
                             "or a factory package.module:callable") from None
    return Network("onnx", path.name, str(path.resolve()), sha256_file(path), OnnxCall(session, path),
                   differentiable=False)


_ONNX_FLOATS = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64"}


class OnnxCall:
    """An onnxruntime session as a function of a torch batch: a tensor for a single output, else a dict by
    output name. A model exported for a fixed batch size gets the batch in chunks of that size."""

    def __init__(self, session: Any, path: Path):
        self.session = session
        self.path = path
        inputs = session.get_inputs()
        if len(inputs) != 1:
            raise ModelError(f"the ONNX model takes {len(inputs)} inputs, not one batch of images", path=path,
                             fix="export a model whose only input is the image batch")
        self.input = inputs[0]
        if self.input.type not in _ONNX_FLOATS:
            raise ModelError(f"the ONNX model's input is {self.input.type}, not a float image batch",
                             path=path, fix="export the model with float32 image input")
        self.outputs = [output.name for output in session.get_outputs()]

    def __call__(self, inputs: torch.Tensor) -> Any:
        self._check_shape(tuple(inputs.shape))
        array = inputs.detach().cpu().numpy().astype(_ONNX_FLOATS[self.input.type], copy=False)
        batch = self.input.shape[0]
        if isinstance(batch, int) and batch != len(array):
            results = [self._run(_padded(array[i : i + batch], batch))
                       for i in range(0, len(array), batch)]
            outputs = [np.concatenate([result[k] for result in results])[: len(array)]
                       for k in range(len(self.outputs))]
        else:
            outputs = self._run(array)
        tensors = [torch.from_numpy(np.ascontiguousarray(out)).to(inputs.device) for out in outputs]
        return tensors[0] if len(tensors) == 1 else dict(zip(self.outputs, tensors, strict=True))

    def _run(self, array: np.ndarray) -> list[np.ndarray]:
        return self.session.run(self.outputs, {self.input.name: array})

    def _check_shape(self, shape: tuple[int, ...]) -> None:
        expected = self.input.shape
        wrong = len(expected) != len(shape) or any(
            isinstance(size, int) and size != shape[axis] for axis, size in enumerate(expected) if axis > 0)
        if wrong:
            stated = tuple(size if isinstance(size, int) else "?" for size in expected)
            raise ModelError(f"the ONNX model takes input of shape {stated}, got images of shape {shape}",
                             path=self.path, fix=f"pass {PARAMETER} with the side the model was exported "
                                                 "for (and a resize if the default does not suit it)",
                             parameter="input_size")


def _padded(array: np.ndarray, size: int) -> np.ndarray:
    missing = size - len(array)
    return array if missing == 0 else np.concatenate([array, np.repeat(array[-1:], missing, axis=0)])


def load_factory(spec: str, args: Mapping[str, Any], device: torch.device) -> Network:
    """``module:attribute`` imported and called with ``args``; it must return a ``torch.nn.Module``."""
    module_name, _, attribute = spec.partition(":")
    try:
        factory: Any = importlib.import_module(module_name)
    except Exception as err:  # the user's module may fail in any way while it is imported
        raise ModelError(f"the factory's module {module_name!r} cannot be imported ({type(err).__name__}: "
                         f"{err})", fix="install the package that provides it, or put its folder on "
                                        "PYTHONPATH (PYTHONPATH=. for a module in this folder)") from None
    for part in attribute.split("."):
        if not hasattr(factory, part):
            raise ModelError(f"{module_name} has no {attribute!r}",
                             fix=f"name a function or class of {module_name} after the colon")
        factory = getattr(factory, part)
    if not callable(factory):
        raise ModelError(f"{spec} is not callable", fix="name a function or class that returns the model")
    try:
        module = factory(**args)
    except TypeError as err:
        raise ModelError(f"{spec} refused its arguments ({err})",
                         fix="pass the keyword arguments it takes (key=value)") from None
    return network_from_module(module, spec, kind="factory", spec=spec, args=dict(args), device=device)


def network_from_module(
    module: Any, name: str, *, kind: str = "module", spec: str = "<in memory>",
    args: dict[str, Any] | None = None, device: torch.device | None = None,
) -> Network:
    """A ``torch.nn.Module`` as a network in eval mode, pinned by its class, spec, arguments and weights."""
    if not isinstance(module, nn.Module):
        raise ModelError(f"{name} returned {type(module).__name__}, not a torch.nn.Module",
                         fix="return the torch.nn.Module that maps a batch of images to their embeddings")
    if device is not None:
        module = module.to(device)
    identity = {"class": f"{type(module).__module__}.{type(module).__qualname__}", "spec": spec,
                "args": args or {}, "weights": weights_sha256(module)}
    return Network(kind, name, spec, json_digest(identity), module.eval(), args or {})


def network_from_callable(function: Callable[[torch.Tensor], Any], name: str, fingerprint: str) -> Network:
    """Any function of a batch as a network, pinned by the ``fingerprint`` its caller vouches for."""
    identity = {"callable": name, "fingerprint": fingerprint}
    return Network("callable", name, "<in memory>", json_digest(identity), function)


def parse_model_args(pairs: Iterable[str]) -> dict[str, Any]:
    """``key=value`` texts (``--model-arg``) as a factory's keyword arguments (:func:`parse_option_value`)."""
    args: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip().isidentifier():
            raise ModelError(f"a keyword argument of a factory is key=value with a Python name as key, got "
                             f"{pair!r}", fix="write each keyword argument of the factory as name=value")
        args[key.strip()] = parse_option_value(value.strip())
    return args
