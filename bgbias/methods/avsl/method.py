"""AVSL (Zhang et al., CVPR 2022), as specified in docs/methods/avsl.md: a similarity graph over the
embedding dimensions of three backbone levels. The embedder is the ``head`` group, the :class:`Collector`
the ``loss`` group; the final loss reaches only α and β (d̂'s nodes are detached, as in the authors' code).
An image's state is its unit level embeddings side by side (``embedding``, (B, 3r)) and the certainties of
levels 2 … L (``certainty``, (B, 2r)); images are ranked by d̂, exactly, in bounded blocks.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping
from typing import Annotated, Any

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from bgbias.errors import OptionError
from bgbias.methods.avsl.graph import (
    CERTAINTY_MINIMA,
    Graph,
    Levels,
    activation_maps,
    batch_edges,
    certainty,
    graph_distance,
    moving_edges,
    normalised_edges,
    pooled_embedding,
)
from bgbias.methods.avsl.losses import hard_triplets, margin_loss, proxy_anchor_loss
from bgbias.methods.base import Batch, Method, MethodOptions, MethodSpec
from bgbias.methods.limits import Fraction, Positive, ZeroOrMore, one_of
from bgbias.methods.registry import register_method
from bgbias.models.backbone import Backbone
from bgbias.options import Must
from bgbias.retrieval.retrievers import LearnedDistance, Retrieval

BASES = ("proxy_anchor", "margin")
LEVELS = 3
EMBEDDING, CERTAINTY = "embedding", "certainty"

BATCH_PROXIES_ABOVE = 1000
"""With more training classes than this (SOP), each batch's losses use only its own classes' proxies, as the
authors' code does (every proxy's (B, C, r) node tensors would not fit)."""

NODE_ELEMENTS = 1 << 24
"""Entries of one (rows, columns, r) node tensor per block of pairs on a GPU (64 MiB in float32; about
five live at once outside autograd): what bounds the memory of ``pairwise_distance`` and of the ranking's
blocks."""

REFERENCE_ROWS = 4096
"""References per block of the exact ranking on a GPU; the queries per block follow from the node entries."""

CPU_NODE_ELEMENTS, CPU_REFERENCE_ROWS = 1 << 20, 1024
"""The same on a CPU: 4 MiB node tensors stay in the caches through the elementwise passes over them (0.81
of a plain matmul's FLOP rate against 0.40 for 64 MiB blocks, docs/benchmarks.md)."""


def block_shape(device: torch.device) -> tuple[int, int]:
    """(node entries, references) per block of pairs on ``device``."""
    if device.type == "cpu":
        return min(NODE_ELEMENTS, CPU_NODE_ELEMENTS), min(REFERENCE_ROWS, CPU_REFERENCE_ROWS)
    return NODE_ELEMENTS, REFERENCE_ROWS


class AVSLOptions(MethodOptions):
    """AVSL's options (the ``loss`` section)."""

    # proxy_anchor | margin: the loss on every level and on d̂
    base: one_of(*BASES) = "proxy_anchor"
    level_weights: Annotated[tuple[ZeroOrMore, ZeroOrMore, ZeroOrMore], Field(strict=False),
                             Must("three weights of 0 or more")] = (1.0, 1.0, 1.0)  # λ_1, λ_2, λ_3
    final_weight: ZeroOrMore = 1.0  # the weight of the loss on d̂
    # lower nodes each high node keeps; null: a quarter of the embedding size
    top_k: Annotated[int | None, Field(ge=1),
                     Must("a whole number of at least 1 (or null: a quarter of the embedding size)")] = None
    edge_momentum: Fraction = 0.5  # γ of the edges' EMA
    reliability_gain: Positive = 10.0  # γ_p in sigmoid(γ_p (α η + β))
    pa_alpha: Positive = 16.0  # ProxyAnchor on the levels: α, γ_pos, γ_neg (dissimilarity form)
    pa_pos_margin: float = 1.8
    pa_neg_margin: float = 2.2
    final_pa_alpha: Positive = 16.0  # ProxyAnchor on d̂
    final_pa_pos_margin: float = 1.8
    final_pa_neg_margin: float = 2.2
    margin: ZeroOrMore = 0.2  # margin loss: α, the fixed margin
    beta: float = 1.2  # margin loss: β, the initial per-class boundary
    hard_negative_cutoff: ZeroOrMore = 0.5  # margin loss: hard negatives nearer than this count as equal
    # row | global: what a map is shifted by before its spread is read
    certainty_min: one_of(*CERTAINTY_MINIMA) = "row"


class Collector(nn.Module):
    """θ2 and the loss parameters: the reliability slope and bias of levels 2 … L, the proxies of every level
    (ProxyAnchor) or a boundary per class for every level and the final loss (margin), and the edge buffers
    (``edges`` low × high per link, ``edge_updates`` the batches folded into them)."""

    def __init__(self, dim: int, num_classes: int, base: str, boundary: float):
        super().__init__()
        self.slope = nn.ParameterList(nn.Parameter(torch.ones(dim)) for _ in range(LEVELS - 1))
        self.bias = nn.ParameterList(nn.Parameter(torch.zeros(dim)) for _ in range(LEVELS - 1))
        self.proxies = nn.ParameterList()
        self.boundaries = nn.ParameterList()
        if base == "proxy_anchor":
            for _ in range(LEVELS):
                proxies = torch.empty(num_classes, dim)
                nn.init.kaiming_normal_(proxies, a=math.sqrt(5))  # std √(1/3)/√r: 0.0255 at r = 512
                self.proxies.append(nn.Parameter(proxies))
        else:
            self.boundaries.extend(
                nn.Parameter(torch.full((num_classes,), boundary)) for _ in range(LEVELS + 1))
        for link in range(LEVELS - 1):
            self.register_buffer(f"edges_{link}", torch.zeros(dim, dim))
        self.register_buffer("edge_updates", torch.zeros((), dtype=torch.int64))

    def edges(self) -> list[Tensor]:
        """ω of every link (levels 1→2, 2→3), low × high."""
        return [getattr(self, f"edges_{link}") for link in range(LEVELS - 1)]


@register_method("avsl")
class AVSL(Method):
    """See the module docstring (per-dataset options: ``configs/methods/avsl.json``)."""

    loss_modules = ("collector",)
    own_attribution = "avsl"
    unit_norm = False  # the state is named arrays; ``embedding`` holds three unit vectors side by side
    Options = AVSLOptions

    @classmethod
    def check_training(cls, options: dict[str, Any], *, batch_size: int, embedding_dim: int) -> None:
        top_k = options.get("top_k", cls.Options.model_fields["top_k"].default)
        if top_k is not None and top_k > embedding_dim:
            raise OptionError(
                f"avsl: loss.top_k = {top_k} is larger than model.embedding_dim = {embedding_dim} (each "
                "high-level node keeps its top-k of the r lower-level nodes, r = the embedding size per "
                "level)",
                fix=f"set loss.top_k to at most {embedding_dim}, or to null for a quarter of it "
                f"({default_top_k(embedding_dim)})",
            )

    def __init__(self, backbone: Backbone, spec: MethodSpec):
        super().__init__(backbone, spec)
        options = self.options
        self.check_training(options, batch_size=1, embedding_dim=spec.embedding_dim)
        self.dim = spec.embedding_dim
        self.top_k = options["top_k"] if options["top_k"] is not None else default_top_k(self.dim)
        self.embedder = nn.ModuleList(
            level_convolution(backbone.channels[stage], self.dim) for stage in backbone.levels)
        self.collector = Collector(self.dim, spec.num_classes, options["base"], options["beta"])

    # ----------------------------------------------------------------------------------------- inference
    def forward_levels(self, images: Tensor) -> tuple[list[Tensor], list[Tensor]]:
        """(unit e^l (B, r), float32 activation maps u^l without gradient) of every level."""
        features = self.backbone(images, self.backbone.levels)
        units, maps = [], []
        for stage, conv in zip(self.backbone.levels, self.embedder, strict=True):
            z = features[stage]
            units.append(F.normalize(pooled_embedding(z, conv), dim=1))
            with torch.autocast(z.device.type, enabled=False):
                maps.append(activation_maps(_full(z), conv))
        return units, maps

    def embed(self, images: Tensor) -> dict[str, Tensor]:
        """``embedding`` (B, 3r): the unit level embeddings side by side; ``certainty`` (B, 2r): η of levels
        2 and 3. Each row depends on its image only (in eval mode)."""
        units, maps = self.forward_levels(images)
        return {EMBEDDING: torch.cat(units, dim=1), CERTAINTY: torch.cat(self.certainties(maps), dim=1)}

    def certainties(self, maps: list[Tensor]) -> list[Tensor]:
        """η of levels 2 … L (B, r) from every level's maps, shifted as ``certainty_min`` says."""
        return [certainty(m, self.options["certainty_min"]) for m in maps[1:]]

    def embedding_options(self) -> dict[str, Any]:
        """``certainty_min``, but for ``global``, whose embeddings the digest of the weights alone names (so
        that a fingerprint keeps its value)."""
        minimum = self.options["certainty_min"]
        return {} if minimum == "global" else {"certainty_min": minimum}

    def graph(self) -> Graph:
        """W̃ (recomputed from the edge buffers), α, β and γ_p."""
        c = self.collector
        return Graph(tuple(normalised_edges(w, self.top_k) for w in c.edges()), tuple(c.slope),
                     tuple(c.bias), self.options["reliability_gain"])

    def state_levels(self, state: Mapping[str, Tensor]) -> Levels:
        """A named state (``embed``'s) as :class:`Levels`, in float32 at least."""
        embedding, certainties = _full(state[EMBEDDING]), _full(state[CERTAINTY])
        return Levels(tuple(embedding.split(self.dim, dim=1)), tuple(certainties.split(self.dim, dim=1)))

    def pairwise_distance(self, queries: Mapping[str, Tensor], references: Mapping[str, Tensor], *,
                          graph: Graph | None = None) -> Tensor:
        """d̂ (Nq, Nr) between two named states, in blocks of at most :func:`block_shape`'s node entries;
        differentiable with respect to the states (attribution maps differentiate it). ``graph`` (default:
        the current one) saves a ranking that calls this block by block from recomputing W̃ each time."""
        rows, cols = self.state_levels(queries), self.state_levels(references)
        device = rows.units[0].device
        with torch.autocast(device.type, enabled=False):
            graph = (graph or self.graph()).to(rows.units[0].dtype)
            elements, _ = block_shape(device)
            col_step = max(1, min(len(cols), elements // self.dim))
            row_step = max(1, elements // (col_step * self.dim))
            blocks = []
            for r0 in range(0, len(rows), row_step):
                block_rows = rows.rows(r0, r0 + row_step)
                blocks.append(torch.cat([
                    graph_distance(block_rows, cols.rows(c0, c0 + col_step), graph)[0]
                    for c0 in range(0, len(cols), col_step)
                ], dim=1))
            return torch.cat(blocks, dim=0)

    def retrieval(self) -> Retrieval:
        """Exact ranking by d̂, in blocks of :func:`block_shape`, W̃ computed once for the whole ranking."""
        device = next(self.parameters()).device
        elements, reference_rows = block_shape(device)
        query_rows = max(1, elements // (reference_rows * self.dim))
        with torch.no_grad():
            graph = self.graph()
        return LearnedDistance(functools.partial(self.pairwise_distance, graph=graph), device=device,
                               query_rows=query_rows, reference_rows=reference_rows, shortlist_key=EMBEDDING)

    # ------------------------------------------------------------------------------------------ training
    def update_edges(self, maps: list[Tensor]) -> None:
        """Fold the batch's ω̂ into the edge buffers (averaged over processes: every rank keeps the same)."""
        with torch.no_grad():
            fresh = torch.stack([batch_edges(low, high) for low, high in itertools.pairwise(maps)])
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                torch.distributed.all_reduce(fresh)
                fresh /= torch.distributed.get_world_size()
            c = self.collector
            first = c.edge_updates == 0
            for edges, batch in zip(c.edges(), fresh, strict=True):
                edges.copy_(moving_edges(edges, batch, self.options["edge_momentum"], first))
            c.edge_updates += 1

    def proxy_levels(self, labels: Tensor, certainties: list[Tensor]) -> tuple[Levels, Tensor]:
        """(the proxies as :class:`Levels`, their labels): every class's, or the batch's classes' above
        :data:`BATCH_PROXIES_ABOVE`. A proxy has no map: its certainty at a level is one number, the mean of
        the batch's over images and nodes."""
        proxies = self.collector.proxies
        if self.spec.num_classes > BATCH_PROXIES_ABOVE:
            classes = labels.unique()
        else:
            classes = torch.arange(self.spec.num_classes, device=labels.device)
        units = tuple(F.normalize(p[classes], dim=1) for p in proxies)
        certainty_of = tuple(c.mean().expand(len(classes), self.dim) for c in certainties)
        return Levels(units, certainty_of), classes

    def loss_terms(self, batch: Batch) -> dict[str, Tensor]:
        """Every loss term, undetached, with the mean reliability of links 2 and 3 (``reliability2``, …)."""
        o, labels = self.options, batch.labels
        units, maps = self.forward_levels(batch.images)
        certainties = self.certainties(maps)
        if self.training:
            self.update_edges(maps)
        rows = Levels(tuple(_full(u) for u in units), tuple(certainties))
        if o["base"] == "proxy_anchor":
            cols, col_labels = self.proxy_levels(labels, certainties)
        else:
            cols, col_labels = rows, labels
        with torch.autocast(labels.device.type, enabled=False):
            graph = self.graph().to(rows.units[0].dtype)
            final, levels, reliable = graph_distance(rows, cols, graph, detach_nodes=True)
            level_losses = [self.base_loss(d, labels, col_labels, level) for level, d in enumerate(levels)]
            final_loss = self.base_loss(final, labels, col_labels, LEVELS)
        total = o["final_weight"] * final_loss + sum(
            w * term for w, term in zip(o["level_weights"], level_losses, strict=True))
        terms = {"loss": total, "final_loss": final_loss}
        terms.update({f"level{i + 1}_loss": term for i, term in enumerate(level_losses)})
        terms.update({f"reliability{i + 2}": p for i, p in enumerate(reliable)})
        return terms

    def base_loss(self, distances: Tensor, labels: Tensor, col_labels: Tensor, which: int) -> Tensor:
        """The base loss of level ``which`` (0 … L − 1) or of d̂ (``which`` = L) on (B, columns) distances."""
        o = self.options
        if o["base"] == "proxy_anchor":
            prefix = "final_pa" if which == LEVELS else "pa"
            return proxy_anchor_loss(distances, labels, col_labels, alpha=o[f"{prefix}_alpha"],
                                     pos_margin=o[f"{prefix}_pos_margin"],
                                     neg_margin=o[f"{prefix}_neg_margin"])
        triplets = hard_triplets(distances, labels, o["hard_negative_cutoff"])
        return margin_loss(distances, labels, self.collector.boundaries[which], triplets, margin=o["margin"])

    def loss(self, batch: Batch) -> dict[str, Tensor]:
        terms = self.loss_terms(batch)
        return {name: value if name == "loss" else value.detach() for name, value in terms.items()}


def default_top_k(dim: int) -> int:
    """A quarter of the embedding size (the paper's 128 of 512), at least 1."""
    return max(1, dim // 4)


def level_convolution(channels: int, dim: int) -> nn.Conv2d:
    """A level's 1×1 convolution with bias, Kaiming-normal (fan-out) weights and a zero bias."""
    conv = nn.Conv2d(channels, dim, kernel_size=1)
    nn.init.kaiming_normal_(conv.weight, mode="fan_out")
    nn.init.zeros_(conv.bias)
    return conv


def _full(tensor: Tensor) -> Tensor:
    """``tensor`` in float32 when it is in half precision (the graph's sums need the range)."""
    return tensor.float() if tensor.dtype in (torch.float16, torch.bfloat16) else tensor
