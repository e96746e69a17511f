"""SmoothGrad for embeddings, as the paper's code computes its attribution maps (docs/design.md, *Attribution
and the foreground score*).

An embedding has no class score, so the distance to the embedding of an all-black image is differentiated,
summed over noisy copies and stretched to [0, 1] with the top percent clipped. The noisy input is mapped back
to [0, 1] with ``InputConvention.invert`` before ``embed`` (which applies the convention again), so the
paper's noise in normalised space holds for every backbone's convention; the distance is the model's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

import torch
from pydantic import Field, ValidationError, model_validator

from bgbias.methods.attribution import per_image_generators, register_attribution
from bgbias.options import Must, Settings, bad_value
from bgbias.retrieval.state import model_form, named_arrays, take_rows
from bgbias.schema import explain_problem

if TYPE_CHECKING:
    from bgbias.methods.base import ImageState
    from bgbias.methods.embedding_model import EmbeddingModel


@register_attribution("smoothgrad")
class SmoothGrad(Settings):
    """The paper's attribution: input gradients of the distance to a black image's embedding, summed over
    noisy copies of the image.

    ``copies`` noisy copies per image with noise σ = ``noise`` · (max − min) of its network input; maps
    normalised by (g − min) / (q − min), q = the ``clip_percentile`` percentile, clamped to [0, 1].

    ``batch`` bounds how many copies go through the network at once (whole images' worth of copies, at least
    one image), which bounds memory without changing the maps.
    """

    copies: Annotated[int, Field(ge=1), Must("a whole number >= 1")] = 25
    noise: Annotated[float, Field(ge=0), Must("a number >= 0")] = 0.15
    clip_percentile: Annotated[float, Field(gt=0, le=100), Must("a number in (0, 100]")] = 99.0
    batch: Annotated[int, Field(ge=1), Must("a whole number >= 1")] = 50

    serves: ClassVar[str] = "every model with an input convention (all built-in methods)"

    @model_validator(mode="wrap")
    @classmethod
    def _in_words(cls, data: Any, handler: Callable[[Any], SmoothGrad]) -> SmoothGrad:
        """A value that is not what its option must be is an OptionError naming it, in the option's words."""
        try:
            return handler(data)
        except ValidationError as error:
            problem = explain_problem(error, cls)
        raise bad_value(f"smoothgrad.{problem.field}", problem.found, problem.wanted)

    def options(self) -> dict[str, Any]:
        return self.model_dump()

    def supports(self, model: EmbeddingModel) -> bool:
        """Any model with an input convention: the noise is added in the network's input space and mapped
        back to [0, 1] with it."""
        return getattr(model, "convention", None) is not None

    def __call__(
        self, model: EmbeddingModel, images01: torch.Tensor,
        generator: torch.Generator | Sequence[torch.Generator],
    ) -> torch.Tensor:
        """(B, H, W) maps in [0, 1] for (B, 3, H, W) images in [0, 1]; the model is left in eval mode."""
        generators = per_image_generators(generator, len(images01))
        model.eval()
        with torch.no_grad():
            reference = model.embed(images01.new_zeros(1, *images01.shape[1:]))
        per_pass = max(1, self.batch // self.copies)
        maps = []
        for start in range(0, len(images01), per_pass):
            inputs = model.convention.apply(images01[start : start + per_pass])
            unit_noise = draw_noise(inputs, self.copies, generators[start : start + per_pass])
            gradients = distance_gradients(model, noisy_copies(inputs, unit_noise, self.noise), reference)
            maps.append(normalise_maps(smoothgrad_maps(gradients), self.clip_percentile))
        if not maps:
            return images01.new_zeros(0, *images01.shape[2:])
        return torch.cat(maps)


def draw_noise(inputs: torch.Tensor, copies: int, generators: Sequence[torch.Generator]) -> torch.Tensor:
    """Standard normal noise (n, copies, 3, H, W) for n images, image i drawn from ``generators[i]`` on the
    generator's own device (so a CPU generator gives the same noise whatever device the model is on)."""
    draws = [
        torch.randn((copies, *inputs.shape[1:]), generator=g, device=g.device, dtype=torch.float32)
        for g in generators
    ]
    return torch.stack(draws).to(device=inputs.device, dtype=inputs.dtype)


def noisy_copies(inputs: torch.Tensor, unit_noise: torch.Tensor, noise: float) -> torch.Tensor:
    """(n, copies, 3, H, W): each input plus ``unit_noise`` times σ = noise · (max − min) of that input."""
    flat = inputs.flatten(1)
    sigma = noise * (flat.amax(dim=1) - flat.amin(dim=1))
    return inputs.unsqueeze(1) + sigma.view(-1, 1, 1, 1, 1) * unit_noise


def distance_gradients(model: EmbeddingModel, noisy: torch.Tensor, reference: ImageState) -> torch.Tensor:
    """Gradients (n, copies, 3, H, W) of each image's mean distance to ``reference`` over its copies, with
    respect to the noisy network inputs; parameters get no ``.grad``."""
    count, copies = noisy.shape[:2]
    leaf = noisy.detach().flatten(0, 1).requires_grad_(True)
    with torch.enable_grad():
        state = named_arrays(model.embed(model.convention.invert(leaf)))
        # One row per call: torch.cdist, and the distances built on it, switch to a matrix-product formula
        # above 25 rows, whose rounding swamps the gradient where an embedding lies close to the reference;
        # the maps would then depend on how many copies share a pass.
        rows = [model.pairwise_distance(model_form(take_rows(state, slice(i, i + 1))), reference)
                for i in range(count * copies)]
        distances = torch.cat(rows).view(count, copies)
        # Summing the per-image means keeps each image's gradient what it would be alone.
        (gradient,) = torch.autograd.grad(distances.mean(dim=1).sum(), leaf, allow_unused=True)
    if gradient is None:  # the embedding ignores its input
        gradient = torch.zeros_like(leaf)
    return gradient.view(noisy.shape)


def smoothgrad_maps(gradients: torch.Tensor) -> torch.Tensor:
    """(n, H, W): the signed mean over channels, then its absolute value, summed over the copies."""
    return gradients.mean(dim=2).abs().sum(dim=1)


def normalise_maps(maps: torch.Tensor, clip_percentile: float) -> torch.Tensor:
    """Per map: (g − min) / (q − min) clamped to [0, 1], q = the ``clip_percentile`` percentile (linear
    interpolation). Where q = min the limit of that is taken: 1 above the minimum, 0 on it."""
    flat = maps.flatten(1).float()
    low = flat.amin(dim=1).view(-1, 1, 1)
    high = torch.quantile(flat, clip_percentile / 100.0, dim=1).view(-1, 1, 1)
    span = high - low
    scaled = ((maps - low) / torch.where(span > 0, span, torch.ones_like(span))).clamp(0.0, 1.0)
    return torch.where(span > 0, scaled, (maps > low).to(scaled.dtype))
