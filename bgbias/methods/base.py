"""The contract every method keeps, so the engine trains and evaluates any of them without special cases.

A method owns its backbone, head and loss parameters and gets composited batches on the device, float RGB in
[0, 1]. The engine asks it for ``loss(batch)`` (``"loss"`` is back-propagated, other terms are logged),
``embed(images)`` (in eval mode independent of the rest of the batch), ``parameter_groups()``,
``pairwise_distance`` (attribution differentiates it) and ``retrieval()``. Methods that need more use the
backbone's named stages, ``batch.indices``, :meth:`Method.on_epoch_start` or :attr:`Method.steps_per_batch`.
Options are declared once, as the method's ``Options`` model (docs/methods/).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import torch
from pydantic import ValidationError
from torch import nn

from bgbias.errors import OptionError
from bgbias.options import Settings, bad_value, must
from bgbias.retrieval.retrievers import ExactL2, Retrieval
from bgbias.schema import explain_problem

if TYPE_CHECKING:
    from bgbias.models.backbone import Backbone
    from bgbias.models.input_convention import InputConvention

ImageState = torch.Tensor | Mapping[str, torch.Tensor]
"""What ``Method.embed`` returns: a (B, D) embedding, or named (B, …) tensors (``bgbias.retrieval.state``)."""


@dataclass(frozen=True)
class Batch:
    """One training batch on the device: ``images`` (B, 3, H, W) float RGB in [0, 1], ``labels`` and
    ``indices`` (positions in the training split) (B,) int64, ``part`` which of the
    :attr:`Method.steps_per_batch` optimiser steps on these images this is."""

    images: torch.Tensor
    labels: torch.Tensor
    indices: torch.Tensor
    part: int = 0


class TrainingData(Protocol):
    """The training split between epochs: fresh batches and randomness, keyed so resumes repeat them."""

    @property
    def num_samples(self) -> int:
        ...

    def batches(self, *, stream: int, epoch: int, pass_index: int, batch_size: int,
                desc: str = "") -> Iterator[Batch]:
        """One pass of m-per-class batches, every image at least once, keyed by seed, stream, epoch, pass."""
        ...

    def generator(self, *, stream: int, epoch: int) -> torch.Generator:
        """A torch generator on the device keyed by (run seed, stream, epoch)."""
        ...


@dataclass(frozen=True)
class MethodSpec:
    """What a method is built from besides its backbone; ``input_size`` sizes DCML's spatial attention."""

    embedding_dim: int
    num_classes: int
    num_samples: int
    pooling: str = "avg"
    options: dict[str, Any] = field(default_factory=dict)
    input_size: int | None = None

    def saved(self) -> dict[str, Any]:
        """The spec as checkpoints hold it, its options in key order: a run resumed from its config.json
        (whose keys are sorted) then writes the same checkpoint bytes as one trained without a stop."""
        return {**asdict(self), "options": dict(sorted(self.options.items()))}


class MethodOptions(Settings):
    """A method's options: one field each, with its default, type and limits."""


class Method(nn.Module, ABC):
    """Base class of every registered method (the contract: the module docstring)."""

    name: ClassVar[str]
    # Attributes holding loss parameters (proxies, learnable margins): they get the ``lr_loss`` group.
    loss_modules: ClassVar[tuple[str, ...]] = ()
    # True when ``embed`` returns unit-length (B, D) vectors (faiss's L2 then ranks as cosine similarity).
    unit_norm: ClassVar[bool] = True
    Options: ClassVar[type[MethodOptions]] = MethodOptions
    # The attribution that is the method's own explanation (SAM's similarity attention, AVSL's node
    # decomposition), which a study scores beside SmoothGrad; None for the others.
    own_attribution: ClassVar[str | None] = None

    def __init__(self, backbone: Backbone, spec: MethodSpec):
        super().__init__()
        self.check_options(spec.options)
        self.options = self.options_with_defaults(spec.options)
        self.backbone = backbone
        self.spec = spec

    @classmethod
    def options_model(cls) -> type[MethodOptions]:
        return cls.Options

    @classmethod
    def recorded_options(cls) -> dict[str, Any]:
        """Every option with its default, as a configuration records them before any layer sets one."""
        return cls.Options().model_dump()

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` in their fields' form (ints for floats as floats); an OptionError for a bad one."""
        model = cls.options_model()
        try:
            checked = model.model_validate(options)
        except ValidationError as error:
            unknown = sorted(str(p["loc"][0]) for p in error.errors() if p["type"] == "extra_forbidden")
            if unknown:
                known = ", ".join(sorted(model.model_fields)) or "(none)"
                raise OptionError(f"{cls.name} does not know the options {unknown}",
                                  fix=f"use some of: {known}") from None
            problem = explain_problem(error, model)
            raise bad_value(f"loss.{problem.field}", problem.found, problem.wanted) from None
        return {name: getattr(checked, name) for name in options}

    @classmethod
    def options_with_defaults(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """Every option of ``Options``: those ``options`` sets, checked, and the defaults of the others."""
        return {**cls.Options().model_dump(), **cls.check_options(
            {name: value for name, value in options.items() if name in cls.Options.model_fields})}

    @classmethod
    def describe_options(cls) -> str:
        """Its options with their defaults (and choices), for ``bgbias methods``."""
        described = []
        for name, spec in cls.Options.model_fields.items():
            expected = must(cls.Options, name) or ""
            choices = f" ({expected})" if expected.startswith("one of") else ""
            described.append(f"{name}={spec.default!r}{choices}")
        return ", ".join(described) or "none"

    def embedding_options(self) -> dict[str, Any]:
        """The options that change what ``embed`` returns for the same weights (fingerprints cover them)."""
        return {}

    @classmethod
    def check_training(cls, options: dict[str, Any], *, batch_size: int, embedding_dim: int) -> None:
        """Refuse options that do not fit the rest of the configuration with an OptionError."""

    @abstractmethod
    def loss(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Loss terms of one batch; ``"loss"`` is the total that is back-propagated."""

    @abstractmethod
    def embed(self, images: torch.Tensor) -> ImageState:
        """Per-image retrieval state of float RGB images in [0, 1]: (B, D) embeddings, or named tensors."""

    def pairwise_distance(self, queries: ImageState, references: ImageState) -> torch.Tensor:
        """(Nq, Nr) distances between two sets of image states, smaller for more alike."""
        return torch.cdist(queries, references)

    def retrieval(self) -> Retrieval:
        """How validation and evaluation rank this method's images."""
        return ExactL2(device=next(self.parameters()).device)

    def set_memory_format(self, memory_format: torch.memory_format) -> None:
        """Keep every 4-D weight, and the images the backbone is given, in ``memory_format``."""
        self.to(memory_format=memory_format)
        self.backbone.memory_format = memory_format

    @property
    def convention(self) -> InputConvention:
        return self.backbone.convention

    @property
    def steps_per_batch(self) -> int:
        """Optimiser steps per training batch (``batch.part`` = 0, 1, …; two for DCML's paired halves)."""
        return 1

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        """The training step's forward pass; DistributedDataParallel calls this."""
        return self.loss(batch)

    def on_epoch_start(self, epoch: int, data: TrainingData) -> dict[str, float]:
        """Before each training epoch (1-based); returns values for the epoch's metrics row."""
        return {}

    def on_step_end(self, batch: Batch) -> None:
        """After each optimiser step on ``batch``, e.g. to move buffers the loss does not train."""

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        """Trainable parameters by group: ``backbone``, ``head`` (everything else) and ``loss``."""
        loss_ids = {id(p) for name in self.loss_modules for p in getattr(self, name).parameters()}
        backbone_ids = {id(p) for p in self.backbone.parameters()}
        groups: dict[str, list[nn.Parameter]] = {"backbone": [], "head": [], "loss": []}
        for parameter in self.parameters():
            if not parameter.requires_grad:
                continue
            if id(parameter) in backbone_ids:
                groups["backbone"].append(parameter)
            elif id(parameter) in loss_ids:
                groups["loss"].append(parameter)
            else:
                groups["head"].append(parameter)
        return groups
