"""MetricFormer, as specified in docs/methods/metricformer.md: a small transformer on the backbone's last
feature map (feature decoupling, batch-wise and feature-wise correlation blocks). Training takes the loss on
two paths, with and without the batch-wise blocks; evaluation uses the plain path only, so an image's
embedding does not depend on the rest of its batch.
"""

from __future__ import annotations

from typing import Annotated, Any

import torch
import torch.nn.functional as F
from pydantic import Field
from pytorch_metric_learning import losses, miners
from torch import Tensor, nn

from bgbias.errors import OptionError
from bgbias.methods.base import Batch, Method, MethodOptions, MethodSpec
from bgbias.methods.limits import AtLeastOne, Positive, ZeroOrMore, one_of
from bgbias.methods.metricformer.blocks import CorrelationBlock, FeatureDecoupling, attention_entropy
from bgbias.methods.metricformer.losses import consistency_loss, diversity_loss
from bgbias.methods.registry import register_method
from bgbias.models.backbone import Backbone
from bgbias.options import Must

BASES = ("margin", "proxy_anchor")
CONSISTENCY = ("symmetric", "teacher")


class MetricFormerOptions(MethodOptions):
    """MetricFormer's options (the ``loss`` section)."""

    # the base metric loss L_M
    base: one_of(*BASES) = "margin"
    k: AtLeastOne = 4  # sub-feature slots; d = embedding_dim / k
    key_dim: AtLeastOne = 256  # C_K, the FDB's query/key width
    blocks: Annotated[int, Field(ge=0), Must("a whole number of at least 0")] = 3  # T, batch-wise blocks
    ffn_mult: AtLeastOne = 4  # a correlation block's FFN width, in multiples of d
    neighbours: AtLeastOne = 4  # n: top-n most similar samples (self included) a sample attends to in a BCB
    epsilon: float = 0.0  # ε: neighbours less similar than this are masked too
    renormalise: bool = False  # renormalise the masked batch attention's rows to sum to 1
    div_alpha: Positive = 10.0  # the diversity loss's slope
    div_margin: float = 0.5  # the diversity loss's cosine margin (0 locks the slots onto fixed positions)
    lambda_div: ZeroOrMore = 1.0
    lambda_cons: ZeroOrMore = 1.0
    # symmetric | teacher (stop-gradient on the batch-aware path)
    consistency: one_of(*CONSISTENCY) = "symmetric"
    margin: ZeroOrMore = 0.2  # margin loss: α, the margin
    beta: float = 1.2  # margin loss: β, the (initial) boundary
    learn_beta: bool = True  # margin loss: one boundary β per class, a loss parameter
    distance_weighted: bool = True  # margin loss: distance-weighted sampling of the triplets
    pa_margin: ZeroOrMore = 0.1  # ProxyAnchor: δ
    pa_alpha: Positive = 32.0  # ProxyAnchor: α


@register_method("metricformer")
class MetricFormer(Method):
    """See the module docstring; options are the ``loss`` section (``configs/methods/metricformer.json``)."""

    loss_modules = ("slot_losses", "final_loss")
    Options = MetricFormerOptions

    @classmethod
    def check_training(cls, options: dict[str, Any], *, batch_size: int, embedding_dim: int) -> None:
        """Refuse a batch smaller than ``neighbours`` and an embedding size that k slots do not divide."""
        o = {**cls.Options().model_dump(), **options}
        if batch_size < o["neighbours"]:
            raise OptionError(
                f"metricformer: data.batch_size = {batch_size} is smaller than loss.neighbours = "
                f"{o['neighbours']} (the batch-wise blocks attend to each sample's top-n neighbours in the "
                "batch)",
                fix=f"set data.batch_size to at least {o['neighbours']}, or lower loss.neighbours",
            )
        if embedding_dim % o["k"]:
            raise OptionError(
                f"metricformer: model.embedding_dim = {embedding_dim} is not a multiple of loss.k = {o['k']} "
                "(the embedding is k sub-features of d dimensions)",
                fix=f"set model.embedding_dim to a multiple of {o['k']}, "
                f"e.g. {max(1, embedding_dim // o['k']) * o['k']}",
            )

    def __init__(self, backbone: Backbone, spec: MethodSpec):
        super().__init__(backbone, spec)
        o = self.options
        self.check_training(o, batch_size=o["neighbours"], embedding_dim=spec.embedding_dim)
        self.slots, self.dim = o["k"], spec.embedding_dim // o["k"]
        self.fdb = FeatureDecoupling(backbone.channels[backbone.final], self.slots, self.dim, o["key_dim"])
        self.bcbs = nn.ModuleList(
            CorrelationBlock(self.dim, o["ffn_mult"], batch_wise=True, neighbours=o["neighbours"],
                             epsilon=o["epsilon"], renormalise=o["renormalise"])
            for _ in range(o["blocks"])
        )
        self.fcb = CorrelationBlock(self.dim, o["ffn_mult"], batch_wise=False)
        self.slot_losses = nn.ModuleList(self.base_loss(self.dim, spec) for _ in range(self.slots))
        self.final_loss = self.base_loss(spec.embedding_dim, spec)
        self.miner = self.build_miner()

    def base_loss(self, size: int, spec: MethodSpec) -> nn.Module:
        """A fresh L_M on ``size``-dimensional embeddings (its own β or proxies)."""
        o = self.options
        if o["base"] == "proxy_anchor":
            return losses.ProxyAnchorLoss(spec.num_classes, size, margin=o["pa_margin"], alpha=o["pa_alpha"])
        return losses.MarginLoss(margin=o["margin"], beta=o["beta"], learn_beta=o["learn_beta"],
                                 num_classes=spec.num_classes if o["learn_beta"] else None)

    def build_miner(self) -> nn.Module | None:
        if self.options["base"] != "margin" or not self.options["distance_weighted"]:
            return None

        return miners.DistanceWeightedMiner()

    # ------------------------------------------------------------------------------------------ inference
    def subfeatures(self, images: Tensor) -> Tensor:
        """Z⁰ (B, k, d), the FDB's sub-features of float RGB images in [0, 1]."""
        return self.decouple(images)[0]

    def decouple(self, images: Tensor) -> tuple[Tensor, Tensor]:
        """(Z⁰ (B, k, d), A_S (B, k, HW)): the sub-features and the attention that pooled them."""
        attention, values = self.fdb.attention(self.backbone(images)[self.backbone.final])
        return attention @ values, attention

    def head(self, subfeatures: Tensor, *, batch_wise: bool) -> Tensor:
        """The unit (B, k·d) embedding from Z⁰: through the BCBs first when ``batch_wise``, then the FCB."""
        tokens = subfeatures
        if batch_wise:
            for block in self.bcbs:
                tokens = block(tokens)
        return F.normalize(self.fcb(tokens).flatten(1), dim=1)

    def embed(self, images: Tensor) -> Tensor:
        """The plain path FDB → FCB: no batch-wise block runs at inference."""
        return self.head(self.subfeatures(images), batch_wise=False)

    # ------------------------------------------------------------------------------------------- training
    def metric(self, loss_fn: nn.Module, embeddings: Tensor, labels: Tensor) -> Tensor:
        """L_M of unit ``embeddings`` with ``loss_fn`` (distance-weighted triplets for the margin loss)."""
        pairs = self.miner(embeddings, labels) if self.miner is not None else None
        return loss_fn(embeddings, labels, pairs)

    def loss(self, batch: Batch) -> dict[str, Tensor]:
        o, labels = self.options, batch.labels
        if len(labels) < o["neighbours"]:
            raise OptionError(
                f"metricformer: a training batch of {len(labels)} images is smaller than loss.neighbours = "
                f"{o['neighbours']}", fix="raise data.batch_size, or lower loss.neighbours",
            )
        z0, attention = self.decouple(batch.images)
        slot = torch.stack([self.metric(fn, F.normalize(z0[:, i], dim=1), labels)
                            for i, fn in enumerate(self.slot_losses)]).mean()
        plain = self.head(z0, batch_wise=False)
        with_batch = self.head(z0, batch_wise=True)
        plain_loss = self.metric(self.final_loss, plain, labels)
        batch_loss = self.metric(self.final_loss, with_batch, labels)
        diversity = diversity_loss(z0, o["div_alpha"], o["div_margin"])
        consistency = consistency_loss(with_batch, plain, teacher=o["consistency"] == "teacher")
        total = (slot + plain_loss + batch_loss + o["lambda_div"] * diversity
                 + o["lambda_cons"] * consistency)
        return {
            "loss": total,
            "slot_loss": slot.detach(),
            "plain_loss": plain_loss.detach(),
            "batch_loss": batch_loss.detach(),
            "diversity_loss": diversity.detach(),
            "consistency_loss": consistency.detach(),
            "attention_entropy": attention_entropy(attention.detach()),
        }
