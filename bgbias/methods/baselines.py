"""The classic DML losses of the paper's Table 1 (and three more), from pytorch-metric-learning.

Each is one backbone + embedding head trained with one PML loss; the loss object is injected with the
hyperparameters of the configuration's ``loss`` section (per-dataset values in ``configs/methods/``). Proxy
and classifier losses (ArcFace, normalized softmax, CosFace, ProxyAnchor) own parameters, which get the
``lr_loss`` learning rate.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, ClassVar

import torch

from bgbias.errors import OptionError
from bgbias.methods.base import Batch, Method, MethodSpec, split_options
from bgbias.methods.registry import register_method
from bgbias.models.backbone import Backbone
from bgbias.models.head import EmbeddingHead


class MetricLossMethod(Method):
    """Backbone → head → L2-normalised embedding, trained with one pytorch-metric-learning loss."""

    loss_class: ClassVar[str]
    # Proxy/classifier losses are built with the number of classes and the embedding size.
    needs_classes: ClassVar[bool] = False
    loss_modules = ("loss_fn",)

    def __init__(self, backbone: Backbone, spec: MethodSpec):
        super().__init__(backbone, spec)
        self.head = EmbeddingHead(backbone.channels[backbone.final], spec.embedding_dim, spec.pooling)
        own, loss_options = split_options(spec.options, self.own_options)
        self.options = own
        self.loss_fn = _pml_object("losses", self.loss_class, {**self.sizes(spec), **loss_options}, self.name)
        self.miner = self.build_miner()

    @classmethod
    def option_types(cls) -> dict[str, Any]:
        """The loss's keyword arguments whose defaults are plain values (a number default takes any number:
        the library writes ``scale=64`` for a float), and our own options."""
        parameters = inspect.signature(_pml_class("losses", cls.loss_class)).parameters.values()
        library = {
            p.name: float if type(p.default) is int else type(p.default)
            for p in parameters if p.default is not p.empty and p.default is not None
        }
        return {**library, **super().option_types()}

    @classmethod
    def describe_options(cls) -> str:
        own = "" if not cls.own_options else super().describe_options() + "; "
        return f"{own}the keyword arguments of pytorch-metric-learning's {cls.loss_class}"

    def sizes(self, spec: MethodSpec) -> dict[str, Any]:
        """What the loss is built with from the data rather than the configuration."""
        if self.needs_classes:
            return {"num_classes": spec.num_classes, "embedding_size": spec.embedding_dim}
        return {}

    def build_miner(self) -> torch.nn.Module | None:
        """The miner that picks the pairs or triplets the loss sees; None: all of them."""
        return None

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(images)[self.backbone.final])

    def pairwise_distance(self, queries: torch.Tensor, references: torch.Tensor) -> torch.Tensor:
        """The loss's own distance (the paper's attribution differentiates it): L2 for the pair and triplet
        losses, negated cosine similarity for those that compare by similarity."""
        distance = getattr(self.loss_fn, "distance", None)
        if distance is None:
            return super().pairwise_distance(queries, references)
        matrix = distance(queries, references)
        return -matrix if distance.is_inverted else matrix

    def loss(self, batch: Batch) -> dict[str, torch.Tensor]:
        embeddings = self.embed(batch.images)
        pairs = self.miner(embeddings, batch.labels) if self.miner is not None else None
        return {"loss": self.loss_fn(embeddings, batch.labels, pairs)}


@register_method("contrastive")
class Contrastive(MetricLossMethod):
    loss_class = "ContrastiveLoss"


@register_method("triplet")
class Triplet(MetricLossMethod):
    loss_class = "TripletMarginLoss"

    @classmethod
    def option_types(cls) -> dict[str, Any]:
        """``triplets_per_anchor`` is "all" (the library's default) or a count."""
        return {**super().option_types(), "triplets_per_anchor": int | str}


@register_method("multi_similarity")
class MultiSimilarity(MetricLossMethod):
    """MS loss; ``loss.miner_epsilon`` (null: no miner) adds the MS miner of the original paper."""

    loss_class = "MultiSimilarityLoss"
    own_options: ClassVar[dict[str, Any]] = {"miner_epsilon": None}

    def build_miner(self) -> torch.nn.Module | None:
        epsilon = self.options["miner_epsilon"]
        if epsilon is None:
            return None
        return _pml_object("miners", "MultiSimilarityMiner", {"epsilon": epsilon}, self.name)


@register_method("arcface")
class ArcFace(MetricLossMethod):
    loss_class = "ArcFaceLoss"
    needs_classes = True


@register_method("normalized_softmax")
class NormalizedSoftmax(MetricLossMethod):
    loss_class = "NormalizedSoftmaxLoss"
    needs_classes = True


@register_method("cosface")
class CosFace(MetricLossMethod):
    loss_class = "CosFaceLoss"
    needs_classes = True


@register_method("proxy_anchor")
class ProxyAnchor(MetricLossMethod):
    loss_class = "ProxyAnchorLoss"
    needs_classes = True


@register_method("margin")
class Margin(MetricLossMethod):
    """Margin loss (Wu et al.); with ``loss.learn_beta`` its per-class boundaries are loss parameters, with
    ``loss.distance_weighted`` its triplets come from distance-weighted sampling (Wu et al.'s, and
    MetricFormer's base loss) instead of every triplet of the batch."""

    loss_class = "MarginLoss"
    own_options: ClassVar[dict[str, Any]] = {"distance_weighted": False}

    def sizes(self, spec: MethodSpec) -> dict[str, Any]:
        return {"num_classes": spec.num_classes} if spec.options.get("learn_beta") else {}

    def build_miner(self) -> torch.nn.Module | None:
        if not self.options["distance_weighted"]:
            return None
        return _pml_object("miners", "DistanceWeightedMiner", {}, self.name)


def _pml_class(kind: str, class_name: str) -> type:
    """``pytorch_metric_learning.<kind>.<class_name>``."""
    return getattr(importlib.import_module(f"pytorch_metric_learning.{kind}"), class_name)


def _pml_object(kind: str, class_name: str, options: dict[str, Any], method: str) -> Any:
    """Build ``pytorch_metric_learning.<kind>.<class_name>(**options)``; a bad option is an OptionError."""
    try:
        return _pml_class(kind, class_name)(**options)
    except TypeError as err:
        raise OptionError(
            f"{method}: {class_name} does not accept the options {sorted(options)}: {err}",
            fix=f"check the loss.* settings against pytorch-metric-learning's {class_name}",
        ) from None
