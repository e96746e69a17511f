"""The classic DML losses of the paper's Table 1 (and three more), from pytorch-metric-learning: a backbone
and embedding head trained with one loss, whose options are the loss's keyword arguments as the library
declares them (per-dataset values in ``configs/methods/``). Proxy and classifier losses' parameters get
``lr_loss``.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import Any, ClassVar

import pydantic
import torch

from bgbias.errors import OptionError
from bgbias.methods.base import Batch, Method, MethodOptions, MethodSpec
from bgbias.methods.registry import register_method
from bgbias.models.backbone import Backbone
from bgbias.models.head import EmbeddingHead


class MetricLossMethod(Method):
    """Backbone → head → L2-normalised embedding, trained with one pytorch-metric-learning loss."""

    loss_class: ClassVar[str]
    # Proxy/classifier losses are built with the number of classes and the embedding size.
    needs_classes: ClassVar[bool] = False
    loss_modules = ("loss_fn",)
    # The loss's keyword arguments that take more than their default's type.
    library_types: ClassVar[dict[str, Any]] = {}

    def __init__(self, backbone: Backbone, spec: MethodSpec):
        super().__init__(backbone, spec)
        self.head = EmbeddingHead(backbone.channels[backbone.final], spec.embedding_dim, spec.pooling)
        loss_options = {key: value for key, value in spec.options.items() if key not in self.options}
        self.loss_fn = _pml_object("losses", self.loss_class, {**self.sizes(spec), **loss_options}, self.name)
        self.miner = self.build_miner()

    @classmethod
    def options_model(cls) -> type[MethodOptions]:
        """Our own options (``Options``) and the loss's keyword arguments whose defaults are plain values,
        read from the library's signature (its defaults stay the library's)."""
        return _loss_options(cls)

    @classmethod
    def recorded_options(cls) -> dict[str, Any]:
        """None: the library keeps the defaults of the options no protocol or user set."""
        return {}

    @classmethod
    def describe_options(cls) -> str:
        own = "" if not cls.Options.model_fields else super().describe_options() + "; "
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
        """The loss's own distance: L2, or negated cosine similarity for losses that compare by it."""
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
    # "all" (the library's default) or a count.
    library_types: ClassVar[dict[str, Any]] = {"triplets_per_anchor": int | str}


class MultiSimilarityOptions(MethodOptions):
    miner_epsilon: float | None = None  # the MS miner's ε; null: no miner


@register_method("multi_similarity")
class MultiSimilarity(MetricLossMethod):
    """MS loss; ``loss.miner_epsilon`` (null: no miner) adds the MS miner of the original paper."""

    loss_class = "MultiSimilarityLoss"
    Options = MultiSimilarityOptions

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


class MarginOptions(MethodOptions):
    distance_weighted: bool = False  # distance-weighted sampling of the triplets instead of all of them


@register_method("margin")
class Margin(MetricLossMethod):
    """Margin loss (Wu et al.); with ``loss.learn_beta`` its per-class boundaries are loss parameters, with
    ``loss.distance_weighted`` its triplets come from distance-weighted sampling (Wu et al.'s, and
    MetricFormer's base loss) instead of every triplet of the batch."""

    loss_class = "MarginLoss"
    Options = MarginOptions

    def sizes(self, spec: MethodSpec) -> dict[str, Any]:
        return {"num_classes": spec.num_classes} if spec.options.get("learn_beta") else {}

    def build_miner(self) -> torch.nn.Module | None:
        if not self.options["distance_weighted"]:
            return None
        return _pml_object("miners", "DistanceWeightedMiner", {}, self.name)


@functools.cache
def _loss_options(method: type[MetricLossMethod]) -> type[MethodOptions]:
    """The options model of ``method``: its ``Options`` and its loss's keyword arguments with plain-value
    defaults (a number default takes any number: the library writes ``scale=64`` for a float)."""
    parameters = inspect.signature(_pml_class("losses", method.loss_class)).parameters.values()
    fields: dict[str, Any] = {
        p.name: (method.library_types.get(p.name, float if type(p.default) is int else type(p.default)),
                 p.default)
        for p in parameters if p.default is not p.empty and p.default is not None
    }
    return pydantic.create_model(f"{method.loss_class}Options", __base__=method.Options, **fields)


def _pml_class(kind: str, class_name: str) -> type:
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
