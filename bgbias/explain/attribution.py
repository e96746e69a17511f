"""Pluggable attribution methods: which pixels of an image a method's embedding depends on.

An attribution is a callable ``(method, images01, generator) -> maps``:

- ``method``: a :class:`~bgbias.methods.base.Method` (the attribution puts it in eval mode);
- ``images01``: (B, 3, H, W) float RGB in [0, 1] on the method's device;
- ``generator``: a ``torch.Generator`` for any randomness, drawn from image by image in batch order, or a
  sequence of B generators, one per image, so that a map depends only on its own image's stream and not on
  which images share its batch (the runner passes one per image);
- returns (B, H, W) float maps in [0, 1] on the same device, one per image.

It also has ``options() -> dict``: every setting that changes its maps, defaults included, which the runner
records beside the scores and compares on resume.

Adding one (e.g. SAM's similarity attention) takes a new module under ``bgbias/explain/`` that decorates a
factory or class with ``@register_attribution("name")`` (its keyword arguments are the options), plus that
module's name in the modules of ``ATTRIBUTIONS`` so it is imported on first use, as the method registry does.
The runner, the score and the gallery only see the callable, so nothing else changes. An attribution that only
works for some methods checks the method it is given and raises an ``OptionError`` naming the ones it serves.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from bgbias.errors import OptionError
from bgbias.registry import Registry

if TYPE_CHECKING:
    import torch

    from bgbias.methods.base import Method

class Attribution(Protocol):
    """What ``build_attribution`` returns (see the module docstring)."""

    def __call__(
        self, method: Method, images01: torch.Tensor, generator: torch.Generator | Sequence[torch.Generator]
    ) -> torch.Tensor: ...

    def options(self) -> dict[str, Any]: ...


ATTRIBUTIONS: Registry[Callable[..., Attribution]] = Registry(
    "attribution method", ("bgbias.explain.smoothgrad",)
)

F = TypeVar("F", bound=Callable[..., Any])


def register_attribution(name: str) -> Callable[[F], F]:
    """Decorator on a factory or class whose keyword arguments are the options: make it available as
    ``name``."""
    return ATTRIBUTIONS.register(name)


def attribution_names() -> list[str]:
    """Every registered attribution method, sorted."""
    return sorted(ATTRIBUTIONS)


def build_attribution(name: str, **options: Any) -> Attribution:
    """The attribution registered as ``name`` with ``options``; an unknown name or option is an
    ``OptionError`` listing the known ones."""
    factory = ATTRIBUTIONS[name]
    signature = inspect.signature(factory)
    try:
        signature.bind(**options)
    except TypeError:
        known = ", ".join(signature.parameters) or "none"
        raise OptionError(
            f"attribution {name!r} does not take the options {', '.join(sorted(options))}",
            fix=f"its options are: {known}",
        ) from None
    return factory(**options)


def per_image_generators(
    generator: torch.Generator | Sequence[torch.Generator], count: int
) -> list[torch.Generator]:
    """One generator per image: the given sequence (which must have ``count`` of them), or ``count`` times
    the single generator, so images draw from it one after another."""
    import torch

    if isinstance(generator, torch.Generator):
        return [generator] * count
    generators = list(generator)
    if len(generators) != count:
        raise ValueError(f"{len(generators)} generators for {count} images")
    return generators
