"""What scoring and explaining a model need of it, whoever trained it.

Evaluation, attribution maps and the study see a model only through :class:`EmbeddingModel`: how it embeds
images, how its images are ranked, how it wants its input, an identity for caches and ledgers, and what a
report says about it. A run trained by bgbias is one implementation (``bgbias.engine.trained.TrainedModel``);
a model from elsewhere needs only these members.

:class:`FeatureMaps` is an optional capability on top: a model that names the modules whose outputs are its
feature maps can be explained by attributions that take Grad-CAM at a feature map (SAM's similarity
attention), whoever trained it. Every model a method backs has it (its backbone's named stages).
:class:`OwnGeometry` is another: a model that wants its images at another size than the dataset's evaluation
geometry says so (an external model's ``--input-size`` and ``--resize``). :class:`ClaimsHome` is a third: a
model whose home becomes its own only with its first result (an external model's ``model.json``), so a model
that fails leaves no folder behind; whoever writes a result under a model's home calls :func:`claim_home`
first. A model whose ``differentiable``
attribute is False (an ONNX model run by onnxruntime) is refused by the attributions, which all differentiate
the model; without the attribute a model is differentiable.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch
    from torch import nn

    from bgbias.data.geometry import EvalGeometry
    from bgbias.methods.base import ImageState
    from bgbias.models.input_convention import InputConvention
    from bgbias.retrieval.retrievers import Retrieval


@dataclass(frozen=True)
class TrainedOn:
    """The dataset a model was trained on, which evaluating it defaults to: its name, folder, split protocol
    and fold, and (where recorded) the identity and image count of its image list then."""

    dataset: str
    root: Path | None
    protocol: str = "fixed"
    fold: int = 0
    identity: str | None = None
    images: int | None = None
    record: Path | None = None
    """The file that recorded it, named when the dataset has changed since."""


@runtime_checkable
class EmbeddingModel(Protocol):
    """A model to score and explain (see the module docstring)."""

    device: torch.device
    """Where its tensors go: the images it embeds must be there."""

    amp: torch.dtype | None
    """The autocast dtype it embeds under (None: full precision)."""

    home: Path
    """The folder its reports and caches go under (a run's folder for runs bgbias trained)."""

    @property
    def convention(self) -> InputConvention:
        """How float RGB in [0, 1] becomes the network's input (SmoothGrad adds its noise there)."""
        ...

    def eval(self) -> Any:
        """Put the model in inference behaviour (batch-norm statistics, no dropout)."""
        ...

    def embed(self, images: torch.Tensor) -> ImageState:
        """Each image's retrieval state from float RGB images in [0, 1] on :attr:`device`, independent of
        the rest of the batch; differentiable where gradients are enabled."""
        ...

    def pairwise_distance(self, queries: ImageState, references: ImageState) -> torch.Tensor:
        """(Nq, Nr) distances between image states, smaller for more alike."""
        ...

    def retrieval(self) -> Retrieval:
        """How a set of its images is ranked."""
        ...

    def fingerprint(self) -> str:
        """An identity of everything that decides its embeddings (e.g. a digest of its weights): equal
        fingerprints promise equal embeddings, so caches and resumable ledgers are keyed by it."""
        ...

    def describe(self) -> dict[str, Any]:
        """What a report records about the model (JSON-able)."""
        ...

    def trained_on(self) -> TrainedOn | None:
        """The dataset it was trained on, or None when unknown (then a dataset must be named)."""
        ...


@runtime_checkable
class FeatureMaps(Protocol):
    """An optional capability of an :class:`EmbeddingModel`: where its feature maps come from.

    An attribution that differentiates a score with respect to a feature map ``A`` (SAM's Grad-CAM) hooks the
    module that produces ``A`` and runs the model's own ``embed``, so it needs no code of the model's.
    """

    def feature_stages(self) -> tuple[str, ...]:
        """The names of the stages whose outputs are (B, C, h, w) feature maps, input side first."""
        ...

    def feature_module(self, stage: str | None = None) -> nn.Module:
        """The module whose output is the feature map of ``stage`` (default: the last stage, the map the
        embedding is pooled from); it must run exactly once per ``embed`` call. An unknown stage is an
        ``OptionError`` naming the stages."""
        ...


@runtime_checkable
class OwnGeometry(Protocol):
    """An optional capability of an :class:`EmbeddingModel`: the geometry its images are brought to."""

    def eval_geometry(self, dataset_name: str) -> EvalGeometry:
        """The evaluation geometry of its images on dataset ``dataset_name`` (corrupted sets and attribution
        maps follow it)."""
        ...


@runtime_checkable
class ClaimsHome(Protocol):
    """An optional capability of an :class:`EmbeddingModel`: its home is marked as its own only when the first
    result is written there (a run's folder is its own from the start)."""

    def claim_home(self) -> None:
        """Mark the home as this model's (once); a home that is not its to write is an error."""
        ...


def claim_home(model: EmbeddingModel) -> None:
    """Before a result goes under ``model.home``: the model claims its home, where it has the capability."""
    if isinstance(model, ClaimsHome):
        model.claim_home()
