"""A model bgbias did not train, as an :class:`~bgbias.methods.embedding_model.EmbeddingModel`: a TorchScript
or ONNX file, a factory's module, or any function of a batch, with the input convention its user states.

After the embedding it takes every trained run's path (images, cache, reports, explain; docs/models.md). Its
reports go to its *home*, named after its model, convention, precision and layout, which never lies inside a
run folder or another model's home (:func:`check_home`). The model is someone else's code: whatever it raises,
and every output that is not one finite real vector of one width per image, is a ``ModelError``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from bgbias.engine.device import memory_format as torch_layout
from bgbias.engine.device import memory_format_name, precision_name, resolve_amp, resolve_device
from bgbias.engine.method_model import json_digest
from bgbias.engine.model_spec import Network, load_network
from bgbias.errors import PARAMETER, BgbiasError, ModelError, OptionError, RecordError, given
from bgbias.fileio import holds_files, write_json_atomic
from bgbias.models.precision import network_autocast
from bgbias.paths import runs_root
from bgbias.retrieval.retrievers import ExactL2
from bgbias.schema import Record, format_header, read_record

if TYPE_CHECKING:
    from bgbias.data.geometry import EvalGeometry
    from bgbias.methods.embedding_model import TrainedOn
    from bgbias.models.input_convention import InputConvention
    from bgbias.models.model_input import ModelInput
    from bgbias.retrieval.retrievers import Retrieval

EXTERNAL_FOLDER = "external"
MODEL_RECORD = "model.json"
RECORD_FORMAT = "bgbias-external-model"


@dataclass
class ExternalModel:
    """``network`` read as ``model_input`` states, on ``device``; its reports under ``home``. ``amp``: the
    autocast dtype it embeds under (None: float32); ``width``: its embeddings' width, from the first batch."""

    network: Network
    model_input: ModelInput
    device: torch.device
    home: Path
    amp: torch.dtype | None
    memory_format: torch.memory_format
    width: int | None = field(default=None, init=False)
    claimed: bool = field(default=False, init=False)

    @property
    def convention(self) -> InputConvention:
        return self.model_input.convention

    @property
    def differentiable(self) -> bool:
        """Whether gradients flow through it (not through onnxruntime): gradient attributions need them."""
        return self.network.differentiable

    @property
    def label(self) -> str:
        """How tables name it: its name and the start of its digest (two files of one name stay apart)."""
        return f"{self.network.name} ({self.network.sha256[:8]})"

    def eval(self) -> ExternalModel:
        if hasattr(self.network.call, "eval"):
            self.network.call.eval()
        return self

    def eval_geometry(self, dataset_name: str) -> EvalGeometry:
        """The geometry its images are brought to on dataset ``dataset_name`` (the dataset's by default)."""
        return self.model_input.geometry(dataset_name)

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """(B, D) checked embeddings of float RGB images in [0, 1]; any failure is a ``ModelError``."""
        inputs = self.convention.apply(images).contiguous(memory_format=self.memory_format)
        shape = tuple(inputs.shape)
        try:
            with network_autocast(inputs.device.type):
                output = self.network.call(inputs)
        except BgbiasError:
            raise
        except Exception as err:  # the model is someone else's code: it may fail in any way
            first_line = (str(err).strip().splitlines() or [""])[0]
            # A function carries no weights bgbias could move: it gets its batch on the device asked for.
            where = (f"; a function gets its batch on {inputs.device}, so keep its weights there, or pass "
                     "device='cpu'" if self.network.kind == "callable" else "")
            raise self._error(
                f"{self.network.name} failed on a batch of shape {shape} ({type(err).__name__}: "
                f"{first_line})",
                "check the input the model was built for: its input size, resize and normalisation; where "
                f"it ran out of memory, a smaller batch size{where}",
            ) from err
        embeddings = read_output(output, self.model_input.output_key, self.network.name)
        if embeddings.is_complex() or not embeddings.is_floating_point():
            dtype = str(embeddings.dtype).removeprefix("torch.")
            raise self._error(
                f"{self.network.name} gave embeddings of dtype {dtype} for a batch of shape {shape}; an "
                "embedding is a vector of real floating-point numbers",
                f"pass {PARAMETER} for the output that holds the embeddings, or make the model return them "
                "as a float tensor", parameter="output_key")
        if embeddings.ndim != 2 or embeddings.shape[0] != images.shape[0]:
            raise self._error(
                f"{self.network.name} gave an output of shape {tuple(embeddings.shape)} for "
                f"{images.shape[0]} images; an embedding is one vector per image, (images, dimensions) (the "
                f"input was a batch of shape {shape})",
                f"pass {PARAMETER} for the output that holds the embeddings, or export a model that "
                "pools its features into one vector per image", parameter="output_key")
        width = embeddings.shape[1]
        if width == 0:
            raise self._error(
                f"{self.network.name} gave embeddings of width 0 for a batch of shape {shape}",
                f"pass {PARAMETER} for the output that holds the embeddings", parameter="output_key")
        if self.width is not None and width != self.width:
            raise self._error(
                f"{self.network.name} gave {width}-dimensional embeddings for a batch of shape {shape}, "
                f"after {self.width}-dimensional ones for the first batch; every image needs an embedding of "
                "one width", "make the model's output width independent of the batch (pool its features to a "
                         "fixed size)")
        if inputs.requires_grad and torch.is_grad_enabled() and not embeddings.requires_grad:
            raise self._error(
                f"{self.network.name} gave embeddings that carry no gradient back to its input (a batch of "
                f"shape {shape}): it detaches them or runs under torch.no_grad, so no attribution can "
                "differentiate it", "export the model without .detach() or torch.no_grad() in its forward")
        if not bool(torch.isfinite(embeddings).all()):
            raise self._error(
                f"{self.network.name} gave NaN or infinite embeddings for a batch of shape {shape}",
                "check the input convention (normalisation, input size) the model was trained with, and "
                "that its weights are intact")
        self.width = width
        embeddings = embeddings.float()
        if self.model_input.l2_normalize:
            return torch.nn.functional.normalize(embeddings, dim=1)
        return embeddings

    def _error(self, problem: str, fix: str, parameter: str | None = None) -> ModelError:
        in_file = self.network.kind in ("torchscript", "onnx")
        return ModelError(problem, path=self.network.spec if in_file else None, fix=fix, parameter=parameter)

    def claim_home(self) -> None:
        """Write ``model.json`` into the home (once, checked again) before the first result goes there."""
        if self.claimed:
            return
        check_home(self)
        write_json_atomic(self.home / MODEL_RECORD, {
            **format_header(RECORD_FORMAT), "label": self.label, "fingerprint": self.fingerprint(),
            "precision": precision_name(self.amp), "memory_format": memory_format_name(self.memory_format),
            **self.describe()["model"]})
        self.claimed = True

    def pairwise_distance(self, queries: torch.Tensor, references: torch.Tensor) -> torch.Tensor:
        return torch.cdist(queries, references)

    def retrieval(self) -> Retrieval:
        return ExactL2(device=self.device)

    def fingerprint(self) -> str:
        """Equal fingerprints embed alike: the network's digest, convention and :func:`compute_identity`."""
        identity = {"network": self.network.sha256, "input": self.model_input.as_dict(),
                    **compute_identity(self.amp, self.memory_format)}
        return json_digest(identity)

    def describe(self) -> dict[str, Any]:
        """What a report records (BGAugment unknown: bgbias did not train it)."""
        model = {"kind": self.network.kind, "name": self.network.name, "spec": self.network.spec,
                 "sha256": self.network.sha256, "input": self.model_input.as_dict()}
        if self.network.args:
            model["args"] = self.network.args
        return {"method": self.label, "bgaugment": None, "run": str(self.home), "model": model}

    def trained_on(self) -> TrainedOn | None:
        return None


def read_output(output: Any, key: str | None, name: str) -> torch.Tensor:
    """The embedding tensor of a network's output: itself, or its entry ``key`` (dict key or position)."""
    if isinstance(output, torch.Tensor):
        if key is not None:
            raise ModelError(f"{given(repr(key))} given, but {name} returns a single tensor",
                             fix=f"leave out {PARAMETER}", parameter="output_key")
        return output
    if isinstance(output, Mapping):
        keys = ", ".join(map(str, output))
        if key is None or key not in output:
            raise ModelError(f"{name} returns a dict with the entries {keys}",
                             fix=f"pass {PARAMETER} with the entry that holds the embeddings",
                             parameter="output_key")
        return _tensor(output[key], key, name)
    if isinstance(output, tuple | list):
        if key is None or not key.isdigit() or int(key) >= len(output):
            raise ModelError(f"{name} returns {len(output)} outputs",
                             fix=f"pass {PARAMETER} with the position (0 … {len(output) - 1}) of the "
                                 "embeddings", parameter="output_key")
        return _tensor(output[int(key)], key, name)
    raise ModelError(f"{name} returns {type(output).__name__}, not a tensor",
                     fix=f"return the embeddings as a tensor, or a dict or tuple of tensors with {PARAMETER}",
                     parameter="output_key")


def _tensor(value: Any, key: str, name: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise ModelError(f"{name}'s output {key!r} is {type(value).__name__}, not a tensor",
                         fix=f"pass {PARAMETER} with the entry that holds the embeddings",
                         parameter="output_key")
    return value


def load_external_model(
    spec: str,
    model_input: ModelInput,
    *,
    args: Mapping[str, Any] | None = None,
    device: str = "auto",
    out: str | os.PathLike[str] | None = None,
    trust: bool = False,
    amp: str | None = None,
    memory_format: str | None = None,
    homes: str | os.PathLike[str] | None = None,
) -> ExternalModel:
    """The model ``spec`` names (:func:`~bgbias.engine.model_spec.load_network`) as :func:`external_model`."""
    resolved = resolve_device(device)
    return external_model(load_network(spec, args or {}, resolved, trust=trust), model_input, resolved, out,
                          amp=amp, memory_format=memory_format, homes=homes)


def external_model(
    network: Network,
    model_input: ModelInput,
    device: torch.device,
    out: str | os.PathLike[str] | None = None,
    *,
    amp: str | None = None,
    memory_format: str | None = None,
    homes: str | os.PathLike[str] | None = None,
) -> ExternalModel:
    """``network`` as an embedding model whose home is ``out`` (default :func:`default_home_name` under
    ``homes``, by default ``runs/external``), checked; :meth:`ExternalModel.claim_home` writes it."""
    dtype, layout = network_compute(network, device, amp, memory_format)
    parent = Path(homes) if homes is not None else runs_root() / EXTERNAL_FOLDER
    home = Path(out) if out is not None else parent / default_home_name(
        network, model_input, compute_identity(dtype, layout))
    model = ExternalModel(network, model_input, device, home, dtype, layout)
    check_home(model)
    return model


def network_compute(network: Network, device: torch.device, amp: str | None,
                    memory_format: str | None) -> tuple[torch.dtype | None, torch.memory_format]:
    """The autocast dtype and memory format ``network`` runs in, its module converted in place. Defaults:
    ``amp`` ``auto``; ``channels_last`` for a module, ``contiguous`` for a plain function (no weights to
    convert). ONNX runs in float32 in its own layout: any other choice is refused."""
    if network.kind == "onnx":
        for option, value, only in (("amp", amp, "off"), ("memory_format", memory_format, "contiguous")):
            if value not in (None, only):
                raise OptionError(
                    f"{given(value)} does not apply to an ONNX model: onnxruntime runs it in float32, "
                    "in a layout of its own",
                    fix=f"leave out {PARAMETER} for an ONNX model, or pass {given(only)}; to score it in "
                        "another precision or layout, pass a TorchScript export or a factory of it",
                    parameter=option)
        return None, torch.contiguous_format
    dtype = resolve_amp(amp or "auto", device)
    layout = torch_layout(memory_format or ("contiguous" if network.kind == "callable" else "channels_last"))
    if network.kind != "callable":
        network.call.to(memory_format=layout)
    return dtype, layout


def compute_identity(amp: torch.dtype | None, layout: torch.memory_format) -> dict[str, str]:
    """Precision and memory format, as fingerprints and home names record them (not float32/contiguous)."""
    identity = {"precision": precision_name(amp), "memory_format": memory_format_name(layout)}
    return {key: value for key, value in identity.items() if value not in ("float32", "contiguous")}


def default_home_name(network: Network, model_input: ModelInput, compute: Mapping[str, str]) -> str:
    """E.g. ``model.pt-1a2b3c4d-5e6f7a8b-bfloat16-channels_last``: the name made safe for a folder, 8 hex of
    the network and of the convention, then ``compute`` (:func:`compute_identity`)."""
    name = re.sub(r"[^A-Za-z0-9_.+-]", "_", network.name).strip(".")[:60] or "model"
    convention = json_digest(model_input.as_dict())[:8]
    return "-".join([name, network.sha256[:8], convention, *compute.values()])


HOME_FIX = (f"pass another {given('DIR')}: a new or empty folder; or leave it out (on the command line each "
            "model and convention then gets a folder of its own under runs/external/; in Python nothing is "
            "written)")


@dataclass(frozen=True)
class Owner:
    """A bgbias run's folder (``fingerprint`` None) or an external model's home."""

    folder: Path
    label: str
    fingerprint: str | None

    def describe(self) -> str:
        return ("the bgbias run folder" if self.fingerprint is None
                else f"the folder of the model {self.label}") + f" {self.folder}"


def check_home(model: ExternalModel) -> None:
    """A ``ModelError`` unless the home is new, empty or this very model's, inside no other owner's."""
    home = model.home
    owner = folder_owner(home)
    if owner is not None and owner.folder == home and owner.fingerprint == model.fingerprint():
        return
    if owner is not None:
        if owner.folder != home:
            problem = f"this folder lies inside {owner.describe()}"
        elif owner.fingerprint is None:
            problem = "this folder is a bgbias run's: another model's reports would go under the run's name"
        else:
            problem = (f"this folder holds the reports of another model, or of this one under another input "
                       f"convention, precision or memory format ({owner.label})")
        raise ModelError(problem, path=home if owner.fingerprint is None else owner.folder / MODEL_RECORD,
                         fix=HOME_FIX, parameter="out")
    if home.exists() and not home.is_dir():
        raise ModelError("this is a file, not a folder for the model's reports", path=home, fix=HOME_FIX,
                         parameter="out")
    if holds_files(home):  # a home where only locks were taken (a failed first try) is still empty
        entries = sorted(entry.name for entry in home.iterdir())
        runs = [name for name in entries if is_run_folder(home / name)]
        shown = (f"bgbias runs ({', '.join(runs[:3])}): it is a runs or study folder" if runs else
                 ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else ""))
        raise ModelError(f"this folder is neither new, nor empty, nor this model's: it holds {shown}",
                         path=home, fix=HOME_FIX, parameter="out")


def folder_owner(path: Path) -> Owner | None:
    """The run folder or model home that ``path`` is or lies inside (another tool's ``model.json``: none)."""
    for folder in [path, *path.resolve().parents]:
        if is_run_folder(folder):
            return Owner(folder, folder.name, None)
        try:
            record = read_model_record(folder / MODEL_RECORD)
        except RecordError:
            if folder == path:
                raise
            continue
        if record is not None:
            return Owner(folder, record.label, record.fingerprint)
    return None


def is_run_folder(folder: Path) -> bool:
    return (folder / "config.json").is_file() and ((folder / "run.json").is_file()
                                                   or (folder / "checkpoints").is_dir())


class ModelRecord(Record):
    """``model.json`` as bgbias reads it back; :meth:`ExternalModel.describe` rides along."""

    label: str
    fingerprint: str
    kind: str
    spec: str


def read_model_record(path: Path) -> ModelRecord | None:
    """An external model's ``model.json``, or None where there is none."""
    if not path.is_file():
        return None
    return read_record(path, ModelRecord, what="the external model's record", file_format=RECORD_FORMAT,
                       fix="re-run `bgbias eval --model SPEC --out DIR` into a new folder; model.json is "
                           "never edited by hand")
