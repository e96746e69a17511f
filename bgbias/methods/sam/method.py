"""SAM, similarity attention and similarity mining (Zheng et al.), as specified in docs/methods/sam.md.

The network is the baselines' and inference a plain embedding. A training step mines tuples, takes the
similarity-attention map of every image at ``stage`` (second order), soft-erases it and re-embeds the image;
the total loss is ``L_ml + gamma · L_sm``. The erased pass never moves BatchNorm running statistics, so the
erased images cannot shift what evaluation normalises with.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from bgbias.errors import OptionError
from bgbias.methods.base import Batch, Method, MethodOptions, MethodSpec
from bgbias.methods.limits import AtLeastOne, Positive, ZeroOrMore, one_of
from bgbias.methods.registry import register_method
from bgbias.methods.sam.attention import (
    SCORES,
    VARIANTS,
    attention_maps,
    erase,
    erasing_mask,
    mining_loss,
    normalise_maps,
    similarity_scores,
    similarity_weights,
)
from bgbias.methods.sam.mining import Tuples, mine_tuples
from bgbias.models.backbone import BATCHNORMS, Backbone
from bgbias.models.head import EmbeddingHead


class SAMOptions(MethodOptions):
    """SAM's options; whether ``stage`` exists depends on the backbone, checked when the method is built."""

    variant: one_of(*VARIANTS) = "triplet"
    # s = wᵀ|f| | projection: the paper's literal s = wᵀf
    score: one_of(*SCORES) = "magnitude"
    margin: ZeroOrMore = 0.2  # the triplet (and quadruplet) base loss's margin
    # Siamese only: different-class pairs are pushed at least this far apart
    negative_margin: ZeroOrMore = 1.0
    gamma: ZeroOrMore = 0.25  # weight of the similarity mining loss
    # the erasing sigmoid's slope (the paper's α)
    sharpness: Positive = 10.0
    threshold: float = 0.5  # the erasing sigmoid's centre on maps normalised to [0, 1] (the paper's β)
    # tuples drawn per batch
    max_tuples: AtLeastOne = 64
    stage: str | None = None  # the backbone stage of A; null: its final stage (the last conv block)


@dataclass(frozen=True)
class SamStep:
    """The pieces of one training step. Rows of ``embeddings``, ``features`` and ``maps`` are the batch's;
    ``used`` are the rows some tuple uses, and ``mask``, ``erased_images`` and ``erased`` have one row per
    used image, which ``local`` (the tuples renumbered into ``used``) indexes."""

    tuples: Tuples
    features: Tensor  # A (B, c, m, n)
    embeddings: Tensor  # f (B, D), unit length
    maps: Tensor  # raw attention maps (B, m, n), ≥ 0
    used: Tensor  # (U,)
    local: Tensor  # (T, roles) rows into the used images
    mask: Tensor  # (U, 1, H, W) soft erasing mask in (0, 1)
    erased_images: Tensor  # (U, 3, H, W) float RGB in [0, 1]
    erased: Tensor  # f* (U, D), unit length


@register_method("sam")
class SAM(Method):
    """See the module docstring (per-dataset options: ``configs/methods/sam.json``)."""

    own_attribution = "sam"
    Options = SAMOptions

    def __init__(self, backbone: Backbone, spec: MethodSpec):
        super().__init__(backbone, spec)
        options = self.options
        stage = options["stage"] if options["stage"] is not None else backbone.final
        if stage not in backbone.stages:
            raise OptionError(
                f"sam: the backbone has no stage {stage!r} to take attention maps at",
                fix=f"set loss.stage to one of: {', '.join(backbone.stages)} (null: {backbone.final})",
            )
        self.stage: str = stage
        self.head = EmbeddingHead(backbone.channels[backbone.final], spec.embedding_dim, spec.pooling)

    # ------------------------------------------------------------------------------------------ inference
    def embed(self, images: Tensor) -> Tensor:
        """Exactly the baselines' embedding: no part of SAM runs at inference."""
        return self.head(self.backbone(images)[self.backbone.final])

    # ------------------------------------------------------------------------------------------- training
    def loss(self, batch: Batch) -> dict[str, Tensor]:
        o = self.options
        tuples = mine_tuples(batch.labels, batch.indices, o["variant"], o["max_tuples"])
        step = self.step(batch.images, tuples.to(batch.images.device))
        metric = self.metric_loss(step.embeddings, step.tuples)
        mining = mining_loss(step.erased, step.local, o["variant"], step.tuples.same)
        zero = step.maps[step.used].flatten(1).amax(dim=1) <= 0
        return {
            "loss": metric + o["gamma"] * mining,
            "metric_loss": metric.detach(),
            "mining_loss": mining.detach(),
            "erased_fraction": step.mask.detach().mean(),
            "zero_maps": zero.float().mean(),
        }

    def step(self, images: Tensor, tuples: Tuples, *, create_graph: bool = True) -> SamStep:
        """Features, maps, mask and erased embeddings of ``images`` and ``tuples``. Without ``create_graph``
        (measuring) the maps, mask and erased images are constants; the graph of ``embeddings`` is spent."""
        o = self.options
        features, embeddings = self.features_and_embeddings(images)
        maps = self.attention(features, embeddings, tuples, create_graph=create_graph)
        if not create_graph:
            maps = maps.detach()
        used, local = torch.unique(tuples.rows, return_inverse=True)
        mask = erasing_mask(normalise_maps(maps[used]), tuple(images.shape[-2:]), o["sharpness"],
                            o["threshold"])
        erased_images = self.erase(images[used], mask)
        with running_statistics_kept(self.backbone):
            erased = self.embed(erased_images)
        return SamStep(tuples, features, embeddings, maps, used, local.view_as(tuples.rows), mask,
                       erased_images, erased)

    def features_and_embeddings(self, images: Tensor) -> tuple[Tensor, Tensor]:
        """A at ``stage`` and the unit embedding f continued from it (equal to :meth:`embed`'s)."""
        features = self.backbone(images, taps=[self.stage])[self.stage]
        final = self.backbone.forward_from(self.stage, features)[self.backbone.final]
        return features, self.head(final)

    def attention(
        self, features: Tensor, embeddings: Tensor, tuples: Tuples, *, create_graph: bool
    ) -> Tensor:
        """Raw similarity-attention maps (B, m, n) at ``features``, summed over each image's tuples."""
        o = self.options
        weights = similarity_weights(embeddings, tuples.rows, o["variant"], tuples.same)
        score = similarity_scores(embeddings, tuples.rows, weights, o["score"])
        return attention_maps(features, score, create_graph=create_graph)

    def erase(self, images: Tensor, mask: Tensor) -> Tensor:
        """Soft-erase ``mask`` from ``images`` in the network's input space (to the convention's mean)."""
        return self.convention.invert(erase(self.convention.apply(images), mask))

    def metric_loss(self, embeddings: Tensor, tuples: Tuples) -> Tensor:
        """L_ml, a mean over the tuples: triplet ``[d(a,p) − d(a,n) + margin]₊`` (quadruplet: summed over both
        negatives); Siamese ``d`` for same-class pairs and ``[negative_margin − d]₊`` for the others."""
        o, rows = self.options, tuples.rows
        anchor = embeddings[rows[:, 0]]
        first = (anchor - embeddings[rows[:, 1]]).norm(dim=1)
        if o["variant"] == "siamese":
            assert tuples.same is not None
            return torch.where(tuples.same, first, (o["negative_margin"] - first).clamp_min(0)).mean()
        terms = [(first - (anchor - embeddings[rows[:, role]]).norm(dim=1) + o["margin"]).clamp_min(0)
                 for role in range(2, rows.shape[1])]
        return torch.stack(terms).sum(dim=0).mean()


@contextlib.contextmanager
def running_statistics_kept(module: nn.Module) -> Iterator[None]:
    """Inside, training-mode BatchNorm layers leave their running statistics and batch count as they were."""
    saved = []
    for layer in module.modules():
        if isinstance(layer, BATCHNORMS) and layer.training and layer.track_running_stats:
            count = None if layer.num_batches_tracked is None else layer.num_batches_tracked.clone()
            saved.append((layer, layer.momentum, count))
            layer.momentum = 0.0  # running = (1 − 0) · running + 0 · batch: unchanged
    try:
        yield
    finally:
        for layer, momentum, count in saved:
            layer.momentum = momentum
            if count is not None:
                layer.num_batches_tracked.copy_(count)
