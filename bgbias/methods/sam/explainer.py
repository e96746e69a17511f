"""SAM's similarity attention as an attribution for any embedding model: ``bgbias explain --attribution sam``.

It needs no training of its own, only an embedding, a reference image and a feature map, so it explains a run
of any method through :class:`~bgbias.methods.embedding_model.FeatureMaps` (a forward hook catches the map
while the model's own ``embed`` runs). The maps are the Siamese same-class Grad-CAM of docs/methods/sam.md
on the ``embedding`` array (of a model with several), upsampled and divided by their maximum; the weights are
symmetric in image and reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from bgbias.errors import BgbiasError, OptionError
from bgbias.methods.attribution import check_references, register_attribution
from bgbias.methods.embedding_model import FeatureMaps
from bgbias.methods.sam.attention import attention_maps, normalise_maps, similarity_scores, similarity_weights
from bgbias.retrieval.state import EMBEDDING, named_arrays

if TYPE_CHECKING:
    from torch import Tensor, nn

    from bgbias.methods.embedding_model import EmbeddingModel


@register_attribution("sam")
@dataclass(frozen=True)
class SimilarityAttention:
    """SAM's similarity attention: Grad-CAM at a feature map of each image's embedding projected on the
    dimensions it shares with its reference image (its nearest neighbour of the same class).

    ``stage``: the backbone stage whose feature map the maps are taken at (default: the last one, which the
    embedding is pooled from). Maps are upsampled bilinearly to the image and divided by their maximum.
    """

    stage: str | None = None

    serves = "every model that names its feature maps (all built-in methods)"
    needs_references = True

    def __post_init__(self) -> None:
        if self.stage is not None and (not isinstance(self.stage, str) or not self.stage):
            raise OptionError(f"sam option stage={self.stage!r} is invalid",
                              fix="give stage as the name of a backbone stage, or leave it out for the last")

    def options(self) -> dict[str, Any]:
        return {"stage": self.stage}

    def supports(self, model: EmbeddingModel) -> bool:
        """Any model with ``FeatureMaps``; one without ``stage`` is an ``OptionError`` naming its stages."""
        if not isinstance(model, FeatureMaps):
            return False
        stages = tuple(model.feature_stages())
        if self.stage is not None and self.stage not in stages:
            raise OptionError(f"sam option stage={self.stage!r} is not a stage of this model's backbone",
                              fix=f"choose one of its stages: {', '.join(stages)}")
        return True

    def __call__(
        self, model: EmbeddingModel, images01: Tensor,
        generator: torch.Generator | Sequence[torch.Generator] | None = None,
        references01: Tensor | None = None,
    ) -> Tensor:
        """(B, H, W) maps in [0, 1] of ``images01``, image i against ``references01[i]``; eval mode."""
        references01 = check_references("sam", images01, references01)
        model.eval()
        return pair_maps(model, model.feature_module(self.stage), images01, references01)[0]


def pair_maps(model: EmbeddingModel, module: nn.Module, images01: Tensor, references01: Tensor
              ) -> tuple[Tensor, Tensor]:
    """The (B, H, W) maps of each image and its reference, at ``module``'s output (run once per embed)."""
    count = len(images01)
    if count == 0:
        empty = images01.new_zeros(0, *images01.shape[2:])
        return empty, empty
    features, state = embed_with_features(model, module, torch.cat([images01, references01]))
    if EMBEDDING not in state:
        raise OptionError(f"sam needs the model's array {EMBEDDING!r}, and its per-image state has only "
                          f"{', '.join(sorted(state))}", fix="choose another attribution for this model")
    embeddings = F.normalize(state[EMBEDDING].float().flatten(1), dim=1)
    rows = torch.arange(count, device=embeddings.device)
    pairs = torch.stack([rows, rows + count], dim=1)
    same = torch.ones(count, dtype=torch.bool, device=embeddings.device)
    with torch.enable_grad():
        weights = similarity_weights(embeddings, pairs, "siamese", same)
        score = similarity_scores(embeddings, pairs, weights)
        if score.requires_grad:
            raw = attention_maps(features, score, create_graph=False)
        else:  # the embedding does not depend on the feature map
            raw = features.new_zeros(features.shape[0], *features.shape[2:])
    upsampled = F.interpolate(raw.detach().float().unsqueeze(1), size=images01.shape[2:], mode="bilinear",
                              align_corners=False).squeeze(1)
    maps = normalise_maps(upsampled.clamp_min(0.0)).clamp(0.0, 1.0)
    return maps[:count], maps[count:]


def embed_with_features(model: EmbeddingModel, module: nn.Module, images01: Tensor
                        ) -> tuple[Tensor, dict[str, Tensor]]:
    """``(A, state)``: the model's per-image state of ``images01`` (named arrays) and the (N, c, m, n) output
    ``A`` of ``module`` during that ``embed``, as a leaf the state is differentiable with respect to (so the
    backward pass stops there and no parameter gets a gradient)."""
    caught: list[Tensor] = []

    def catch(_module: nn.Module, _inputs: Any, output: Any) -> Tensor:
        if not isinstance(output, torch.Tensor) or output.dim() != 4:
            raise OptionError(
                "sam needs a (B, C, h, w) feature map at the chosen stage, and its module returns "
                f"{type(output).__name__}{'' if not hasattr(output, 'shape') else tuple(output.shape)}",
                fix="choose another stage (--attribution-option stage=NAME)")
        leaf = output.detach().requires_grad_(True)
        caught.append(leaf)
        return leaf

    handle = module.register_forward_hook(catch)
    try:
        with torch.enable_grad():
            state = named_arrays(model.embed(images01))
    finally:
        handle.remove()
    if len(caught) != 1:
        raise BgbiasError(
            f"the feature-map module ran {len(caught)} times in one embed, so sam cannot tell which map "
            "the embedding comes from",
            fix="name a module that runs exactly once per embed in the model's feature_module",
        )
    return caught[0], state
