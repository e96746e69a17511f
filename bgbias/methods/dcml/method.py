"""DCML, Deep Causal Metric Learning (Deng & Zhang, ICML 2022), as specified in docs/methods/dcml.md.

Training: k environment attention copies → shared head → shared CosFace proxies, each environment's terms
weighted by learned per-image environment weights, plus an ERM branch (the authors' code). Inference: one
attention net with the mean of the k copies' weights. ``paired_halves`` (the authors' SOP code) trains a batch
of same-class pairs in two optimiser steps, one per half.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bgbias.errors import OptionError
from bgbias.methods.base import Batch, Method, MethodOptions, MethodSpec, TrainingData
from bgbias.methods.dcml.attention import AttentionCopies
from bgbias.methods.dcml.environments import learn_environments
from bgbias.methods.dcml.penalties import (
    compactness,
    dummy_penalties,
    environment_loss,
    logit_scale_penalty,
    pair_compactness,
)
from bgbias.methods.dcml.proxies import CosFaceProxies
from bgbias.methods.limits import AtLeastOne, Positive, ZeroOrMore, one_of
from bgbias.methods.registry import register_method
from bgbias.models.backbone import Backbone
from bgbias.models.head import global_pool


class BatchNormHead(nn.Module):
    """Attended map → pool → BatchNorm → linear → z (B, D), not normalised (the γ term compares raw z)."""

    def __init__(self, channels: int, dim: int, pooling: str):
        super().__init__()
        self.pooling = pooling
        self.norm = nn.BatchNorm1d(channels)
        self.linear = nn.Linear(channels, dim)

    def forward(self, feature_map: Tensor) -> Tensor:
        return self.linear(self.norm(global_pool(feature_map, self.pooling)))


HEAD_NORM_GROUPS = ("backbone", "head")
"""The parameter group of the head's BatchNorm: the backbone's (the authors' code) or the head's."""


class DCMLOptions(MethodOptions):
    """DCML's options (the ``loss`` section); the authors' names in brackets."""

    scale: Positive = 100.0  # CosFace a
    margin: float = 0.6182  # CosFace m
    alpha: ZeroOrMore = 1e-4  # IRM penalty (the authors' w_cof)
    beta: ZeroOrMore = 1e-2  # attention copies near their mean (at_cof)
    gamma: ZeroOrMore = 1e-1  # same-class compactness (reg_cof)
    environments: AtLeastOne = 2  # k (at_num)
    channel_reduction: AtLeastOne = 2
    env_update_every: AtLeastOne = 5  # e (updata_env)
    env_passes: AtLeastOne = 5  # the paper's intent; 1 reproduces the authors' code
    env_lr: Positive = 0.5
    env_batch_size: AtLeastOne = 64
    paired_halves: bool = False  # the authors' SOP scheme: two steps per batch, γ to the pair partner
    # The group (learning rate) of the head's BatchNorm, as the authors'
    head_norm_group: one_of(*HEAD_NORM_GROUPS) = "backbone"


@register_method("dcml")
class DCML(Method):
    """See the module docstring; options are the ``loss`` section (``configs/methods/dcml.json``)."""

    loss_modules = ("proxies", "erm_proxies")
    Options = DCMLOptions

    def __init__(self, backbone: Backbone, spec: MethodSpec):
        super().__init__(backbone, spec)
        options = self.options
        if spec.input_size is None:
            raise OptionError("dcml sizes its spatial attention by the feature map, but got no input size",
                              fix="build it with MethodSpec(input_size=<training crop side>)")
        channels, height, width = backbone.feature_shape(spec.input_size)
        k, reduction = options["environments"], options["channel_reduction"]
        self.attention = AttentionCopies(k, channels, height, width, reduction)
        self.erm_attention = AttentionCopies(1, channels, height, width, reduction)
        self.head = BatchNormHead(channels, spec.embedding_dim, spec.pooling)
        cosface = (spec.num_classes, spec.embedding_dim, options["scale"], options["margin"])
        self.proxies = CosFaceProxies(*cosface)
        self.erm_proxies = CosFaceProxies(*cosface)
        # ω: environment logits per training image (uniform until first learned); saved with the model.
        self.register_buffer("env_logits", torch.zeros(spec.num_samples, k))

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        """The base groups, with the head's BatchNorm moved to the backbone's group where
        ``head_norm_group`` says so (the authors' ``learner.py`` trains it at the backbone's learning
        rate)."""
        groups = super().parameter_groups()
        if self.options["head_norm_group"] == "backbone":
            norm = {id(p) for p in self.head.norm.parameters()}
            groups["backbone"] += [p for p in groups["head"] if id(p) in norm]
            groups["head"] = [p for p in groups["head"] if id(p) not in norm]
        return groups

    def embed(self, images: Tensor) -> Tensor:
        feature_map = self.backbone(images)[self.backbone.final]
        return F.normalize(self.head(self.attention(feature_map)), dim=1)

    @property
    def steps_per_batch(self) -> int:
        return 2 if self.options["paired_halves"] else 1

    def loss(self, batch: Batch) -> dict[str, Tensor]:
        """The loss of the whole batch, or with ``paired_halves`` of its half ``batch.part``."""
        own, partner = self._halves(batch) if self.options["paired_halves"] else (slice(None), None)
        feature_map = self.backbone(batch.images)[self.backbone.final]
        labels = batch.labels[own]
        weights = self.env_logits[batch.indices[own]].softmax(dim=1)
        env_ce, irm, compact = [], [], []
        for j in range(self.attention.copies):
            z = self.head(self.attention(feature_map, j))  # the whole batch: the head's BatchNorm sees all
            logits = self.proxies(z[own], labels)
            env_ce.append(environment_loss(logits, labels, weights[:, j]))
            irm.append(logit_scale_penalty(logits, labels, weights[:, j]))
            if partner is None:
                compact.append(compactness(z, labels, weights[:, j]))
            else:
                compact.append(pair_compactness(z[own], z[partner], weights[:, j]))
        o = self.options
        terms = {
            "env_ce": torch.stack(env_ce).mean(),
            "irm_penalty": torch.stack(irm).mean(),
            "attention_spread": self.attention.spread(),
            "compactness": torch.stack(compact).mean(),
        }
        invariant = (terms["env_ce"] + o["alpha"] * terms["irm_penalty"]
                     + o["beta"] * terms["attention_spread"] + o["gamma"] * terms["compactness"])
        erm_logits = self.erm_proxies(self.head(self.erm_attention(feature_map[own], 0)), labels)
        terms["erm"] = F.cross_entropy(erm_logits, labels)
        return {"loss": invariant + terms["erm"], "invariant": invariant, **terms}

    @staticmethod
    def _halves(batch: Batch) -> tuple[slice, slice]:
        """(this step's half, the other) of a batch pairing even and odd positions: part 0 trains the even."""
        labels = batch.labels
        if batch.part not in (0, 1) or len(labels) % 2 or not torch.equal(labels[0::2], labels[1::2]):
            raise OptionError(
                f"dcml's paired_halves needs batches of same-class pairs (positions 2i and 2i+1) and "
                f"part 0 or 1, got {len(labels)} images and part {batch.part}",
                fix="set data.m_per_class=2 (as the SOP configuration does), or loss.paired_halves=false",
            )
        return slice(batch.part, None, 2), slice(1 - batch.part, None, 2)

    def environment_objective(self, batch: Batch, weights: Tensor) -> Tensor:
        """Eq. 11 on one batch, model frozen: differentiable in ``weights`` (B, k) only."""
        with torch.no_grad():
            feature_map = self.backbone(batch.images)[self.backbone.final]
            attended = [self.attention(feature_map, j) for j in range(self.attention.copies)]
        total = []
        for j, attended_j in enumerate(attended):
            scale_penalty, attention_penalty = dummy_penalties(
                attended_j, lambda m: self.proxies(self.head(m), batch.labels), batch.labels, weights[:, j]
            )
            total.append(scale_penalty + attention_penalty)
        return torch.stack(total).mean()

    def on_epoch_start(self, epoch: int, data: TrainingData) -> dict[str, float]:
        """Before epoch 1 and after every ``env_update_every`` epochs: re-learn the environment weights."""
        o = self.options
        if (epoch - 1) % o["env_update_every"] != 0:
            return {}
        was_training = self.training
        self.eval()
        try:
            learned = learn_environments(
                self.environment_objective, data, epoch=epoch, environments=self.attention.copies,
                passes=o["env_passes"], lr=o["env_lr"], batch_size=o["env_batch_size"],
            )
        finally:
            self.train(was_training)
        self.env_logits.copy_(learned.logits)
        return learned.summary()
