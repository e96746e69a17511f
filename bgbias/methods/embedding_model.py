"""What scoring and explaining a model need of it, whoever trained it.

Evaluation, attribution and the study see a model only through :class:`EmbeddingModel`; a bgbias run
(``bgbias.engine.trained.TrainedModel``) is one implementation, an outside model another. Optional
capabilities: :class:`FeatureMaps` (Grad-CAM attributions), :class:`OwnGeometry` (its own image size),
:class:`ClaimsHome` (a home claimed with the first result) and a ``differentiable`` attribute (False for ONNX:
every attribution refuses it; absent means differentiable).
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
    """The dataset a model was trained on, which evaluating it defaults to; ``identity`` and ``images``
    describe its image list then, ``record`` the file that recorded it (named when the dataset changed)."""

    dataset: str
    root: Path | None
    protocol: str = "fixed"
    fold: int = 0
    identity: str | None = None
    images: int | None = None
    record: Path | None = None


@runtime_checkable
class EmbeddingModel(Protocol):
    """A model to score and explain; ``amp``: its autocast dtype (None: full precision)."""

    device: torch.device
    amp: torch.dtype | None
    home: Path
    @property
    def convention(self) -> InputConvention:
        """How float RGB in [0, 1] becomes the network's input (SmoothGrad adds its noise there)."""
        ...

    def eval(self) -> Any:
        ...

    def embed(self, images: torch.Tensor) -> ImageState:
        """Each image's retrieval state, independent of the rest of its batch; differentiable."""
        ...

    def pairwise_distance(self, queries: ImageState, references: ImageState) -> torch.Tensor:
        ...

    def retrieval(self) -> Retrieval:
        ...

    def fingerprint(self) -> str:
        """Equal fingerprints promise equal embeddings: caches and resumable ledgers are keyed by it."""
        ...

    def describe(self) -> dict[str, Any]:
        ...

    def trained_on(self) -> TrainedOn | None:
        """The dataset it was trained on, or None when unknown (then a dataset must be named)."""
        ...


@runtime_checkable
class FeatureMaps(Protocol):
    """Where its feature maps come from: Grad-CAM hooks that module and runs the model's own ``embed``."""

    def feature_stages(self) -> tuple[str, ...]:
        """The names of the stages whose outputs are (B, C, h, w) feature maps, input side first."""
        ...

    def feature_module(self, stage: str | None = None) -> nn.Module:
        """The module whose output is ``stage``'s map (default: the last); it runs once per ``embed``."""
        ...


@runtime_checkable
class OwnGeometry(Protocol):

    def eval_geometry(self, dataset_name: str) -> EvalGeometry:
        """Its images' evaluation geometry (corrupted sets and attribution maps follow it)."""
        ...


@runtime_checkable
class ClaimsHome(Protocol):
    """A model whose home becomes its own only with its first result."""

    def claim_home(self) -> None:
        """Mark the home as this model's (once); a home that is not its to write is an error."""
        ...


def claim_home(model: EmbeddingModel) -> None:
    """Before a result goes under ``model.home``: the model claims its home, where it has the capability."""
    if isinstance(model, ClaimsHome):
        model.claim_home()
