"""A model bgbias did not train, as an :class:`~bgbias.methods.embedding_model.EmbeddingModel`: a TorchScript
or ONNX file, a factory's module, or any function of a batch, with the input convention its user states
(:class:`~bgbias.models.model_input.ModelInput`).

Everything after the embedding is the path every trained run takes: the same clean and corrupted images
(at the model's geometry), the evaluation cache (keyed by the model's digest and its convention), the report
files, ``bgbias report`` tables and ``bgbias explain``. Its reports go to its *home*: ``--out``, or by default
``runs/external/<name>-<model digest>-<convention digest>``, so two models, or one model under two
conventions, never share one. The home's ``model.json`` says whose reports it holds.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from bgbias.engine.model_spec import Network, load_network
from bgbias.errors import ModelError
from bgbias.fileio import write_json_atomic
from bgbias.paths import runs_root
from bgbias.retrieval.retrievers import ExactL2
from bgbias.schema import read_record

if TYPE_CHECKING:
    import torch

    from bgbias.data.geometry import EvalGeometry
    from bgbias.methods.embedding_model import TrainedOn
    from bgbias.models.input_convention import InputConvention
    from bgbias.models.model_input import ModelInput
    from bgbias.retrieval.retrievers import Retrieval

EXTERNAL_FOLDER = "external"
"""Under the runs folder: the default homes of external models."""
MODEL_RECORD = "model.json"
RECORD_FORMAT = "bgbias-external-model"


@dataclass
class ExternalModel:
    """``network`` read as ``model_input`` states, on ``device``; its reports under ``home``."""

    network: Network
    model_input: ModelInput
    device: torch.device
    home: Path
    amp: torch.dtype | None = None

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
        """(B, D) embeddings of float RGB images in [0, 1]: the convention applied, the network run, its
        output read, checked (one finite row per image) and L2-normalised where the convention says so."""
        import torch

        output = self.network.call(self.convention.apply(images))
        embeddings = read_output(output, self.model_input.output_key, self.network.name)
        if embeddings.ndim != 2 or embeddings.shape[0] != images.shape[0]:
            raise ModelError(
                f"{self.network.name} gave an output of shape {tuple(embeddings.shape)} for "
                f"{images.shape[0]} images; an embedding is one vector per image, (images, dimensions)",
                fix="pass --output-key for the output that holds the embeddings, or export a model that "
                    "pools its features into one vector per image",
            )
        if not bool(torch.isfinite(embeddings).all()):
            raise ModelError(
                f"{self.network.name} gave NaN or infinite embeddings",
                fix="check the input convention (--normalize, --input-size) the model was trained with, and "
                    "that its weights are intact",
            )
        embeddings = embeddings.float()
        if self.model_input.l2_normalize:
            return torch.nn.functional.normalize(embeddings, dim=1)
        return embeddings

    def pairwise_distance(self, queries: torch.Tensor, references: torch.Tensor) -> torch.Tensor:
        import torch

        return torch.cdist(queries, references)

    def retrieval(self) -> Retrieval:
        return ExactL2()

    def fingerprint(self) -> str:
        """The network's digest and the convention: equal fingerprints embed alike."""
        identity = {"network": self.network.sha256, "input": self.model_input.as_dict()}
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()

    def describe(self) -> dict[str, Any]:
        """What a report records: the label, no BGAugment setting (unknown: bgbias did not train it), the
        network and the convention."""
        model = {"kind": self.network.kind, "name": self.network.name, "spec": self.network.spec,
                 "sha256": self.network.sha256, "input": self.model_input.as_dict()}
        if self.network.args:
            model["args"] = self.network.args
        return {"method": self.label, "bgaugment": None, "run": str(self.home), "model": model}

    def trained_on(self) -> TrainedOn | None:
        return None


def read_output(output: Any, key: str | None, name: str) -> torch.Tensor:
    """The embedding tensor of a network's output: the output itself, or its entry ``key`` (a dict's key, or
    a tuple's position)."""
    import torch

    if isinstance(output, torch.Tensor):
        if key is not None:
            raise ModelError(f"--output-key {key!r} given, but {name} returns a single tensor",
                             fix="drop --output-key")
        return output
    if isinstance(output, Mapping):
        keys = ", ".join(map(str, output))
        if key is None or key not in output:
            raise ModelError(f"{name} returns a dict with the entries {keys}",
                             fix="pass --output-key with the entry that holds the embeddings")
        return _tensor(output[key], key, name)
    if isinstance(output, tuple | list):
        if key is None or not key.isdigit() or int(key) >= len(output):
            raise ModelError(f"{name} returns {len(output)} outputs",
                             fix=f"pass --output-key with the position (0 … {len(output) - 1}) of the "
                                 "embeddings")
        return _tensor(output[int(key)], key, name)
    raise ModelError(f"{name} returns {type(output).__name__}, not a tensor",
                     fix="return the embeddings as a tensor, or a dict or tuple of tensors with --output-key")


def _tensor(value: Any, key: str, name: str) -> torch.Tensor:
    import torch

    if not isinstance(value, torch.Tensor):
        raise ModelError(f"{name}'s output {key!r} is {type(value).__name__}, not a tensor",
                         fix="pass --output-key with the entry that holds the embeddings")
    return value


def load_external_model(
    spec: str,
    model_input: ModelInput,
    *,
    args: Mapping[str, Any] | None = None,
    device: str = "auto",
    out: str | os.PathLike[str] | None = None,
    trust: bool = False,
) -> ExternalModel:
    """The model ``spec`` names (:func:`~bgbias.engine.model_spec.load_network`; a TorchScript file checked
    unless ``trust``) on ``device``, with its home claimed (:func:`external_model`)."""
    from bgbias.engine.device import resolve_device

    resolved = resolve_device(device)
    return external_model(load_network(spec, args or {}, resolved, trust=trust), model_input, resolved, out)


def external_model(
    network: Network, model_input: ModelInput, device: torch.device, out: str | os.PathLike[str] | None = None
) -> ExternalModel:
    """``network`` as an embedding model whose home is ``out`` (default
    ``runs/external/<name>-<model digest>-<convention digest>``). The home's ``model.json`` records the
    model; a home that holds another model's reports is a ``ModelError``."""
    home = Path(out) if out is not None else runs_root() / EXTERNAL_FOLDER / default_home_name(
        network, model_input)
    model = ExternalModel(network, model_input, device, home)
    claim_home(model)
    return model


def default_home_name(network: Network, model_input: ModelInput) -> str:
    """``<name>-<8 hex of the network>-<8 hex of the convention>``, the name made safe for a folder."""
    name = re.sub(r"[^A-Za-z0-9_.+-]", "_", network.name).strip(".")[:60] or "model"
    convention = hashlib.sha256(json.dumps(model_input.as_dict(), sort_keys=True).encode()).hexdigest()
    return f"{name}-{network.sha256[:8]}-{convention[:8]}"


def claim_home(model: ExternalModel) -> None:
    """Write ``model.json`` into the model's home, unless the home records another model (an error)."""
    path = model.home / MODEL_RECORD
    record = {"format": RECORD_FORMAT, "version": 1, "label": model.label, "fingerprint": model.fingerprint(),
              **model.describe()["model"]}
    if path.is_file() and read_model_record(path).get("fingerprint") != record["fingerprint"]:
        raise ModelError("this folder holds the reports of another model, or of this one under another "
                         "input convention", path=path,
                         fix="pass another --out, or leave --out out (each model and convention then gets a "
                             "folder of its own under runs/external/)")
    write_json_atomic(path, record)


class ModelRecord(TypedDict):
    """``model.json`` as bgbias reads it back (:mod:`bgbias.schema`): the description of :meth:`describe`
    rides along."""

    format: Literal["bgbias-external-model"]
    version: int
    label: str
    fingerprint: str
    kind: str
    spec: str


def read_model_record(path: Path) -> dict[str, Any]:
    """An external model's ``model.json``, or an empty dict where there is none; one that is damaged or not
    a model's record is a ``RecordError`` naming it."""
    if not path.is_file():
        return {}
    return read_record(path, ModelRecord, what="the external model's record",
                       fix="score the model again into a new folder (`bgbias eval --model SPEC --out DIR`); "
                           "model.json is never edited by hand")
