"""AVSL's own attribution: ``bgbias explain --attribution avsl`` on an AVSL run (docs/methods/avsl.md).

AVSL's dissimilarity splits exactly into one share per node (Property 1,
:func:`~bgbias.methods.avsl.graph.node_contributions`); each node's share is spread over where its activation
map is positive, levels added up at image size. (Shifting maps by their global minimum instead spread every
share over the whole image: foreground score 0.01 against 0.09 on the bench, docs/results.md.)
``weigh=weight`` draws the node weights instead of the shares; ``level`` keeps a single level.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from bgbias.errors import OptionError
from bgbias.methods.attribution import check_references, register_attribution
from bgbias.methods.avsl.graph import node_contributions, node_weights
from bgbias.methods.avsl.method import AVSL, LEVELS
from bgbias.methods.sam.attention import normalise_maps

if TYPE_CHECKING:
    from torch import Tensor

    from bgbias.methods.embedding_model import EmbeddingModel

WEIGHINGS = ("contribution", "weight")


@register_attribution("avsl")
@dataclass(frozen=True)
class NodeAttribution:
    """Where AVSL's dissimilarity of an image to its reference lies, from the exact per-node decomposition
    of d̂ spread over the nodes' activation maps (see the module docstring).

    ``weigh``: ``contribution`` (each node's share of d̂) or ``weight`` (how much each node counts).
    ``level``: 1, 2 or 3 for one level's map; none for all.
    """

    weigh: str = "contribution"
    level: int | None = None

    serves = "AVSL runs (its graph over three levels' embedding dimensions)"
    needs_references = True

    def __post_init__(self) -> None:
        if self.weigh not in WEIGHINGS:
            raise OptionError(f"avsl option weigh={self.weigh!r} is invalid",
                              fix=f"use one of: {', '.join(WEIGHINGS)}")
        if self.level is not None and self.level not in range(1, LEVELS + 1):
            raise OptionError(f"avsl option level={self.level!r} is invalid",
                              fix=f"use a level from 1 to {LEVELS}, or leave it out for all of them")

    def options(self) -> dict[str, Any]:
        return {"weigh": self.weigh, "level": self.level}

    def supports(self, model: EmbeddingModel) -> bool:
        return isinstance(getattr(model, "method", None), AVSL)

    def __call__(
        self, model: EmbeddingModel, images01: Tensor,
        generator: torch.Generator | Sequence[torch.Generator] | None = None,
        references01: Tensor | None = None,
    ) -> Tensor:
        """(B, H, W) maps in [0, 1] of ``images01``, image i against ``references01[i]``; eval mode."""
        references01 = check_references("avsl", images01, references01)
        model.eval()
        method: AVSL = model.method  # type: ignore[attr-defined]
        count = len(images01)
        with torch.no_grad():
            units, maps = method.forward_levels(torch.cat([images01, references01]))
            units = [u.float() for u in units]
            shares = pair_shares(method, units, maps, count, self.weigh)
            image_maps = spread_over_maps(shares, [m[:count] for m in maps], images01.shape[2:], self.level)
        return normalise_maps(image_maps.clamp_min(0.0)).clamp(0.0, 1.0)


def pair_shares(
    method: AVSL, units: list[Tensor], maps: list[Tensor], count: int, weigh: str
) -> list[Tensor]:
    """Every level's (B, r) per-node shares of d̂ for the pairs (row i, row count + i) of ``units`` and
    ``maps`` (images first, their references after): λ = w ⊙ δ, or w alone for ``weigh="weight"``."""
    graph = method.graph().to(torch.float32)
    nodes = [(u[:count] - u[count:]).square() for u in units]
    certainties = method.certainties([m.float() for m in maps])
    reliable = [torch.sigmoid(graph.gain * (graph.slope[i] * c[:count] * c[count:] + graph.bias[i]))
                for i, c in enumerate(certainties)]
    if weigh == "weight":
        return node_weights(reliable, graph.edges)
    return node_contributions(nodes, reliable, graph.edges)


def spread_over_maps(shares: list[Tensor], maps: list[Tensor], size: torch.Size, level: int | None) -> Tensor:
    """(B, H, W): each node's share spread over the positive part of its activation map (in proportion,
    summing to 1 over positions; nothing from a node that is nowhere positive), summed over the nodes of
    each level, upsampled to ``size`` and summed over the levels (or level ``level`` alone)."""
    total = None
    for index, (share, cam) in enumerate(zip(shares, maps, strict=True)):
        if level is not None and index != level - 1:
            continue
        flat = F.normalize(cam.float().flatten(2).clamp_min(0.0), p=1, dim=2)
        spread = torch.einsum("br,brp->bp", share, flat).view(-1, 1, *cam.shape[2:])
        spread = F.interpolate(spread, size=tuple(size), mode="bilinear", align_corners=False).squeeze(1)
        total = spread if total is None else total + spread
    assert total is not None
    return total
