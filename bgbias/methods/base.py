"""The contract every method keeps, so the engine trains and evaluates any of them without special cases.

A method owns its backbone, head and loss parameters. The engine hands it batches of images that are already
composited (BGAugment) and on the device, as float RGB in [0, 1]; the backbone applies its own input
convention. The engine asks a method three things:

- ``loss(batch)``: a dict of loss terms; ``"loss"`` is what is back-propagated, the others are logged;
- ``embed(images)``: each image's state for retrieval, which in eval mode must not depend on the rest of the
  batch: a (B, D) embedding, or several named (B, …) tensors (AVSL: an embedding per level and certainties);
- ``parameter_groups()``: which parameters belong to the backbone, the head and the loss, so each group gets
  its own learning rate;
- ``pairwise_distance(queries, references)``: how far apart images are, from their states. Attribution maps
  differentiate it;
- ``retrieval()``: how a set of images is ranked, for validation and evaluation alike: exact squared L2 of
  the embeddings (faiss) by default, or the method's learned distance
  (:class:`~bgbias.retrieval.retrievers.LearnedDistance`, e.g. AVSL). A method whose ``embed`` returns unit
  vectors says so in ``unit_norm`` (the contract tests check it).

Methods that need more reach into the backbone through its named stages (``backbone.forward(images, taps)``,
``backbone.forward_from(stage, features)``), keep per-sample state indexed by ``batch.indices``, or update
themselves between epochs from fresh training batches in :meth:`Method.on_epoch_start`. A method that trains
each batch in several optimiser steps says how many in :attr:`Method.steps_per_batch`.

A method's options (the configuration's ``loss`` section) are declared once, as its :class:`MethodOptions`
model ``Options``: each field carries its default, type and limits (``Must`` words); a library loss's options
are read from its signature (``options_model``). ``check_options`` refuses an unknown option or a value that
is not what it must be while the configuration is resolved, so a bad option stops a run before its folder
exists, and again when the method is built.
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
from bgbias.options import Settings, bad_value, must, setting_problem
from bgbias.retrieval.retrievers import ExactL2, Retrieval

if TYPE_CHECKING:
    from bgbias.models.backbone import Backbone
    from bgbias.models.input_convention import InputConvention

ImageState = torch.Tensor | Mapping[str, torch.Tensor]
"""What ``Method.embed`` returns: a (B, D) embedding, or named (B, …) tensors (``bgbias.retrieval.state``)."""


@dataclass(frozen=True)
class Batch:
    """One training batch on the device.

    ``images``: float RGB in [0, 1], (B, 3, H, W). ``labels``: (B,) int64 in ``0 … num_classes − 1``.
    ``indices``: (B,) int64 positions of the images in the training split, ``0 … num_samples − 1``.
    ``part``: which of the method's :attr:`Method.steps_per_batch` optimiser steps on these images this is.
    """

    images: torch.Tensor
    labels: torch.Tensor
    indices: torch.Tensor
    part: int = 0


class TrainingData(Protocol):
    """The training split as a method sees it between epochs (the engine provides it): fresh batches of the
    training images, augmented and composited as the training steps' are, and randomness of the method's own,
    both keyed so that a resumed run repeats what an uninterrupted one did."""

    @property
    def num_samples(self) -> int:
        """Images in the training split (``Batch.indices`` run over ``0 … num_samples − 1``)."""
        ...

    def batches(self, *, stream: int, epoch: int, pass_index: int, batch_size: int,
                desc: str = "") -> Iterator[Batch]:
        """One pass over the split in m-per-class batches, every image at least once, keyed by (run seed,
        stream, epoch, pass)."""
        ...

    def generator(self, *, stream: int, epoch: int) -> torch.Generator:
        """A torch generator on the device keyed by (run seed, stream, epoch)."""
        ...


@dataclass(frozen=True)
class MethodSpec:
    """What a method is built from besides its backbone: head shape, training-set size, hyperparameters and
    the side of the square images it trains and is evaluated on (``input_size``; layers sized by the feature
    map, as DCML's spatial attention, need it)."""

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
    """A method's options: one field each, with its default, type and limits (see the module docstring)."""


class Method(nn.Module, ABC):
    """Base class of every registered method (see the module docstring for the contract)."""

    name: ClassVar[str]
    # Attributes holding loss parameters (proxies, learnable margins): they get the ``lr_loss`` group.
    loss_modules: ClassVar[tuple[str, ...]] = ()
    # True when ``embed`` returns unit-length (B, D) vectors (faiss's L2 then ranks as cosine similarity).
    unit_norm: ClassVar[bool] = True
    # The method's options (the configuration's ``loss`` section).
    Options: ClassVar[type[MethodOptions]] = MethodOptions
    # The attribution that is the method's own explanation (SAM's similarity attention, AVSL's node
    # decomposition), which a study scores beside SmoothGrad; None for the others.
    own_attribution: ClassVar[str | None] = None

    def __init__(self, backbone: Backbone, spec: MethodSpec):
        super().__init__()
        self.check_options(spec.options)
        self.backbone = backbone
        self.spec = spec

    @classmethod
    def options_model(cls) -> type[MethodOptions]:
        """Every option the method takes: its ``Options``."""
        return cls.Options

    @classmethod
    def recorded_options(cls) -> dict[str, Any]:
        """The options a run's configuration records before any layer sets one: every option, with its
        default."""
        return cls.Options().model_dump()

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` in the form their fields take (ints given for floats as floats, lists as tuples);
        an option the method does not take is an OptionError that lists those it takes, a value of the wrong
        type or outside its limits one that says what it must be."""
        model = cls.options_model()
        try:
            checked = model.model_validate(options)
        except ValidationError as error:
            unknown = sorted(str(p["loc"][0]) for p in error.errors() if p["type"] == "extra_forbidden")
            if unknown:
                known = ", ".join(sorted(model.model_fields)) or "(none)"
                raise OptionError(f"{cls.name} does not know the options {unknown}",
                                  fix=f"use some of: {known}") from None
            problem = setting_problem(error, model, options)
            if problem.kind == "limit":
                raise OptionError(f"{cls.name} option {problem.key} = {problem.value!r} is invalid",
                                  fix=f"set loss.{problem.key} to {problem.expected}") from None
            raise bad_value(f"loss.{problem.key}", problem.value, problem.expected) from None
        return {name: getattr(checked, name) for name in options}

    @classmethod
    def options_with_defaults(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """Every option of ``Options``: those ``options`` sets, checked, and the defaults of the others."""
        return {**cls.Options().model_dump(), **cls.check_options(
            {name: value for name, value in options.items() if name in cls.Options.model_fields})}

    @classmethod
    def describe_options(cls) -> str:
        """Its own options with their defaults (and their choices, where its limits name them), for
        ``bgbias methods``."""
        described = []
        for name, spec in cls.Options.model_fields.items():
            expected = must(cls.Options, name) or ""
            choices = f" ({expected})" if expected.startswith("one of") else ""
            described.append(f"{name}={spec.default!r}{choices}")
        return ", ".join(described) or "none"

    def embedding_options(self) -> dict[str, Any]:
        """The options that change what ``embed`` returns for the same weights (a model's fingerprint covers
        them). None by default."""
        return {}

    @classmethod
    def check_training(cls, options: dict[str, Any], *, batch_size: int, embedding_dim: int) -> None:
        """Refuse options that do not fit the rest of the configuration (an OptionError with the fix), while
        it is resolved: e.g. MetricFormer's neighbour count against the batch size. Nothing by default."""

    @abstractmethod
    def loss(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Loss terms of one batch; ``"loss"`` is the total that is back-propagated."""

    @abstractmethod
    def embed(self, images: torch.Tensor) -> ImageState:
        """Per-image retrieval state of float RGB images in [0, 1]: (B, D) embeddings, or named tensors."""

    def pairwise_distance(self, queries: ImageState, references: ImageState) -> torch.Tensor:
        """(Nq, Nr) distances between two sets of image states, smaller for more alike; Euclidean by
        default."""
        return torch.cdist(queries, references)

    def retrieval(self) -> Retrieval:
        """How validation and evaluation rank this method's images: exact squared L2 of the embeddings,
        searched and scored on the method's device."""
        return ExactL2(device=next(self.parameters()).device)

    def set_memory_format(self, memory_format: torch.memory_format) -> None:
        """Keep every 4-D weight, and the images the backbone is given, in ``memory_format``
        (``torch.channels_last``: the layout convolution kernels run fastest on)."""
        self.to(memory_format=memory_format)
        self.backbone.memory_format = memory_format

    @property
    def convention(self) -> InputConvention:
        """How its backbone wants float RGB in [0, 1] (an embedding model's input convention)."""
        return self.backbone.convention

    @property
    def steps_per_batch(self) -> int:
        """How many optimiser steps the engine takes on each training batch, one after the other: it calls
        ``loss`` once per step with ``batch.part`` = 0, 1, …, so each step's forward sees the parameters the
        step before it left. One for every method but DCML's paired-halves option."""
        return 1

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        """The training step's forward pass; DistributedDataParallel calls this."""
        return self.loss(batch)

    def on_epoch_start(self, epoch: int, data: TrainingData) -> dict[str, float]:
        """Called before each training epoch (1-based), e.g. to update per-sample state from ``data``;
        returns values to record in the epoch's row of the run's metrics."""
        return {}

    def on_step_end(self, batch: Batch) -> None:
        """Called after each optimiser step on ``batch`` (its update applied), e.g. to move running statistics
        or buffers the loss does not train; nothing by default."""

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        """Trainable parameters by group: ``backbone``, ``head`` (everything else) and ``loss``."""
        loss_ids = {
            id(p) for name in self.loss_modules for p in getattr(self, name).parameters()
        }
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
