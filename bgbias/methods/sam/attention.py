"""Similarity attention: Grad-CAM maps for an embedding model, from a score built out of the embeddings
(docs/methods/sam.md). An embedding has no class score, so each dimension is weighted by how much it keeps a
tuple's images together or apart, and Grad-CAM differentiates the embeddings projected on those weights.
Training (the mining loss) and explanation (``bgbias explain --attribution sam``) share these functions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from bgbias.errors import OptionError

VARIANTS = ("triplet", "siamese", "quadruplet")
"""Tuple shapes of the paper: (anchor, positive, negative), (image, image) with a same-class flag, and
(anchor, positive, negative, negative)."""


def similarity_weights(
    embeddings: Tensor, tuples: Tensor, variant: str, same: Tensor | None = None
) -> Tensor:
    """(T, D) weights of each tuple's dimensions (paper eqs. in docs/methods/sam.md): positives contribute
    ``1 − |Δ|``, negatives ``|Δ|``, multiplied. ``tuples`` is (T, roles) of row indices into ``embeddings``;
    ``same`` (T,) bool says which Siamese pairs share a class."""
    f = embeddings
    if variant == "siamese":
        if same is None:
            raise OptionError("Siamese weights need to know which pairs share a class",
                              fix="pass same=(T,) booleans")
        gap = (f[tuples[:, 0]] - f[tuples[:, 1]]).abs()
        return torch.where(same[:, None], 1 - gap, gap)
    anchor = f[tuples[:, 0]]
    weights = 1 - (anchor - f[tuples[:, 1]]).abs()
    for role in range(2, tuples.shape[1]):
        weights = weights * (anchor - f[tuples[:, role]]).abs()
    return weights


SCORES = ("magnitude", "projection")
"""How an image's embedding is scored against a tuple's weights: ``wᵀ|f|`` (the default) or the paper's
literal ``wᵀf``; the two agree for non-negative embeddings (docs/methods/sam.md)."""


def similarity_scores(
    embeddings: Tensor, tuples: Tensor, weights: Tensor, score: str = "magnitude"
) -> Tensor:
    """The sum over tuples and roles of ``s = wᵀ|f|`` (``"magnitude"``) or ``wᵀf`` (``"projection"``), ``w``
    detached as a Grad-CAM class score is. ``|f|``: with a signed linear head, flipping an axis's sign
    (which changes no distance) must not turn its evidence into counter-evidence."""
    fixed = weights.detach()
    if score == "magnitude":
        embeddings = embeddings.abs()
    return sum((fixed * embeddings[tuples[:, role]]).sum() for role in range(tuples.shape[1]))


def attention_maps(features: Tensor, score: Tensor, *, create_graph: bool) -> Tensor:
    """(N, m, n) maps ``ReLU(Σ_k GAP(∂score/∂A_k) · A_k)`` of the feature maps ``features`` (N, c, m, n),
    which ``score`` must depend on. ``create_graph`` keeps the maps differentiable (the mining loss's
    second-order path through the maps to the weights below ``features``)."""
    (gradient,) = torch.autograd.grad(score, features, create_graph=create_graph)
    channel_weights = gradient.mean(dim=(2, 3), keepdim=True)
    return F.relu((channel_weights * features).sum(dim=1))


def normalise_maps(maps: Tensor, eps: float = 1e-12) -> Tensor:
    """Each map divided by its maximum, so a fixed threshold means the same for every image."""
    peak = maps.flatten(1).amax(dim=1).clamp_min(eps)
    return maps / peak.view(-1, *([1] * (maps.dim() - 1)))


def erasing_mask(maps: Tensor, size: tuple[int, int], sharpness: float, threshold: float) -> Tensor:
    """(N, 1, H, W) soft mask ``sigmoid(sharpness · (M − threshold))`` of normalised maps, upsampled."""
    upsampled = F.interpolate(maps.unsqueeze(1), size=size, mode="bilinear", align_corners=False)
    return torch.sigmoid(sharpness * (upsampled - threshold))


def erase(inputs: Tensor, mask: Tensor) -> Tensor:
    """``x̂ = x ⊙ (1 − mask)`` in the network's input space: erased pixels take the convention's mean."""
    return inputs * (1 - mask)


def mining_loss(erased: Tensor, tuples: Tensor, variant: str, same: Tensor | None = None,
                clamp: float = 2.0) -> Tensor:
    """The similarity mining loss of the erased embeddings (paper eqs. 3–5), a mean over tuples.

    Triplet: ``| ‖a*−p*‖ − ‖a*−n*‖ |`` (the erased triplet should no longer separate its negative);
    quadruplet: the triplet term of (a, p, n1) plus that of (a, p, n2); Siamese: ``−min(‖1*−2*‖, clamp)``
    over same-class pairs only (after erasing, a positive pair should stop looking alike; a bounded reward).
    """
    anchor = erased[tuples[:, 0]]
    if variant == "siamese":
        if same is None or not bool(same.any()):
            return erased.sum() * 0.0
        distance = (anchor - erased[tuples[:, 1]]).norm(dim=1)[same]
        return -distance.clamp(max=clamp).mean()
    positive = (anchor - erased[tuples[:, 1]]).norm(dim=1)
    terms = [(positive - (anchor - erased[tuples[:, role]]).norm(dim=1)).abs()
             for role in range(2, tuples.shape[1])]
    return torch.stack(terms).sum(dim=0).mean()
