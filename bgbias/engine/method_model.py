"""A method's network as an :class:`~bgbias.methods.embedding_model.EmbeddingModel`: what a trained run is,
and what a method trained in someone else's loop can be wrapped into to be scored and explained."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from bgbias.engine.device import memory_format_name
from bgbias.errors import OptionError

if TYPE_CHECKING:
    from torch import nn

    from bgbias.methods.base import ImageState, Method
    from bgbias.methods.embedding_model import TrainedOn
    from bgbias.models.input_convention import InputConvention
    from bgbias.retrieval.retrievers import Retrieval


class MethodBacked:
    """The members of an embedding model that a :class:`~bgbias.methods.base.Method` answers itself."""

    method: Method

    @property
    def convention(self) -> InputConvention:
        return self.method.convention

    def eval(self) -> MethodBacked:
        self.method.eval()
        return self

    def embed(self, images: torch.Tensor) -> ImageState:
        return self.method.embed(images)

    def pairwise_distance(self, queries: ImageState, references: ImageState) -> torch.Tensor:
        return self.method.pairwise_distance(queries, references)

    @property
    def memory_format(self) -> torch.memory_format:
        """The layout its weights and its backbone's inputs are kept in (:meth:`Method.set_memory_format`)."""
        return self.method.backbone.memory_format

    def retrieval(self) -> Retrieval:
        return self.method.retrieval()

    def fingerprint(self) -> str:
        """The digest of the weights and buffers, the :meth:`Method.embedding_options`, and the memory format
        where it is not contiguous (convolutions round differently in it)."""
        weights = weights_sha256(self.method)
        layout = memory_format_name(self.memory_format)
        identity = {"options": self.method.embedding_options(),
                    "memory_format": None if layout == "contiguous" else layout}
        identity = {key: value for key, value in identity.items() if value}
        if not identity:
            return weights
        return json_digest({"weights": weights, **identity})

    def feature_stages(self) -> tuple[str, ...]:
        """The backbone's named stages, input side first."""
        return tuple(self.method.backbone.stages)

    def feature_module(self, stage: str | None = None) -> nn.Module:
        """The backbone block of ``stage``, by default its final stage (the map embedding heads pool)."""
        backbone = self.method.backbone
        stage = backbone.final if stage is None else stage
        if stage not in backbone.stages:
            raise OptionError(f"{stage!r} is not a stage of this model's backbone",
                              fix=f"choose one of its stages: {', '.join(backbone.stages)}")
        return backbone.blocks[stage]


@dataclass
class MethodModel(MethodBacked):
    """A method in memory on ``device``, its reports under ``home``."""

    method: Method
    device: torch.device
    home: Path = Path(".")
    amp: torch.dtype | None = None
    trained: TrainedOn | None = None
    about: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        return {"method": self.method.name, **self.about}

    def trained_on(self) -> TrainedOn | None:
        return self.trained


def json_digest(identity: dict[str, Any]) -> str:
    """The SHA-256 of ``identity`` as JSON with sorted keys (anything JSON lacks as its text)."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()


def weights_sha256(model: nn.Module) -> str:
    """Checksum of a model's state: equal for equal weights, whatever file or optimiser they came with."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}|{flat.dtype}|{tuple(tensor.shape)}\n".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
