"""Pluggable attribution methods: which pixels of an image a model's embedding depends on.

An attribution is a callable ``(model, images01, generator) -> maps``: (B, 3, H, W) float RGB in [0, 1] on
the model's device in, (B, H, W) maps in [0, 1] out; ``generator`` is one ``torch.Generator`` drawn from image
by image, or one per image, so that a map depends only on its own image's stream. It also has ``options()``
(every setting that changes its maps, recorded and compared on resume), ``supports(model)`` and ``serves``
(the models it supports, in words). One with ``needs_references = True`` also gets ``references01``, row i
the reference of image i (:data:`REFERENCE_RULE`). Adding one: docs/contributing.md. This module imports
nothing above ``bgbias.methods``, so a method package may import it.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import torch

from bgbias.errors import OptionError
from bgbias.methods.registry import METHOD_MODULES
from bgbias.registry import Registry

if TYPE_CHECKING:
    from bgbias.methods.embedding_model import EmbeddingModel

DEFAULT_ATTRIBUTION = "smoothgrad"
"""The paper's attribution; at its default options its label is its name."""

MAX_LABEL_LENGTH = 80
"""A longer label (many or long option values) becomes the name and a digest of the options."""


REFERENCE_RULE = (
    "each image's nearest other image of its own class among the reference images, ranked by the model's own "
    "retrieval; the nearest image of any class where it is alone in its class"
)


class Attribution(Protocol):
    """What ``build_attribution`` returns (the module docstring)."""

    serves: str

    def __call__(
        self, model: EmbeddingModel, images01: torch.Tensor,
        generator: torch.Generator | Sequence[torch.Generator],
    ) -> torch.Tensor: ...

    def options(self) -> dict[str, Any]: ...

    def supports(self, model: EmbeddingModel) -> bool: ...


ATTRIBUTION_MODULES = (
    "bgbias.attribution.smoothgrad", "bgbias.methods.sam.explainer", "bgbias.methods.avsl.explainer",
)
"""The built-in attributions' modules that no method module (``METHOD_MODULES``) imports."""

ATTRIBUTIONS: Registry[Callable[..., Attribution]] = Registry(
    "attribution method", tuple(dict.fromkeys((*ATTRIBUTION_MODULES, *METHOD_MODULES)))
)

F = TypeVar("F", bound=Callable[..., Any])

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
_SAFE = re.compile(r"[A-Za-z0-9_.+-]*")


def register_attribution(name: str) -> Callable[[F], F]:
    """Decorator on a factory or class whose keyword arguments are the options: make it available as
    ``name``, which names output folders and so must be filename-safe (letters, digits, ``_ . + -``)."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"attribution name {name!r} is not filename-safe: use letters, digits and _ . + -")
    return ATTRIBUTIONS.register(name)


def attribution_defaults(name: str) -> dict[str, Any]:
    """The options of attribution ``name`` with their defaults (``inspect.Parameter.empty`` where none)."""
    return {
        key: parameter.default
        for key, parameter in inspect.signature(ATTRIBUTIONS[name]).parameters.items()
        if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
    }


def build_attribution(name: str, **options: Any) -> Attribution:
    """The attribution registered as ``name`` with ``options``; an ``OptionError`` for unknown ones."""
    factory = ATTRIBUTIONS[name]
    signature = inspect.signature(factory)
    try:
        signature.bind(**options)
    except TypeError:
        raise OptionError(
            f"attribution {name!r} does not take the options {', '.join(sorted(options))}",
            fix=f"its options are: {_known_options(name)}",
        ) from None
    return factory(**options)


def needs_references(attribution: Attribution) -> bool:
    """Whether ``attribution`` explains each image against a reference image (see the module docstring)."""
    return bool(getattr(attribution, "needs_references", False))


def check_references(name: str, images01: torch.Tensor, references01: torch.Tensor | None) -> torch.Tensor:
    """``references01``, checked to be one reference image per image of ``images01``."""
    if references01 is None:
        raise OptionError(f"{name} explains each image against a reference image, and none was given",
                          fix="pass references01, one reference image per image")
    if references01.shape != images01.shape:
        raise ValueError(f"references of shape {tuple(references01.shape)} for images of shape "
                         f"{tuple(images01.shape)}")
    return references01


def check_supported(name: str, attribution: Attribution, model: EmbeddingModel) -> None:
    """An ``OptionError`` unless the attribution ``supports`` ``model`` and it is ``differentiable``."""
    what = model.describe().get("method") or type(model).__name__
    if not getattr(model, "differentiable", True):
        raise OptionError(
            f"attribution {name!r} differentiates the model, and gradients cannot flow through {what!r} "
            "(an ONNX model runs in onnxruntime)",
            fix="explain a TorchScript export of the model (torch.jit.save) or its factory "
                "package.module:callable instead; `bgbias eval` scores the ONNX file itself",
        )
    if not attribution.supports(model):
        raise OptionError(
            f"attribution {name!r} cannot explain {what!r}",
            fix=f"{name} serves {attribution.serves}; choose another attribution (see `bgbias methods`)",
        )


def attribution_label(name: str, options: Mapping[str, Any] | None = None) -> str:
    """The name of an attribution with ``options``, as explain output folders carry it: the name, then each
    non-default option as ``<key><value>``, sorted, joined by ``-`` (``smoothgrad-copies50-noise0.3``; a
    whole float as an integer: 95.0 and 95 are one setting). Where that is not filename-safe or longer than
    ``MAX_LABEL_LENGTH``: ``<name>-<8 hex digest of the options>``."""
    defaults = attribution_defaults(name)
    changed = {
        key: _option_text(value)
        for key, value in sorted((options or {}).items())
        if key not in defaults or defaults[key] is inspect.Parameter.empty or value != defaults[key]
    }
    label = "-".join([name, *(f"{key}{text}" for key, text in changed.items())])
    safe = all(_SAFE.fullmatch(key + text) for key, text in changed.items())
    if safe and len(label) <= MAX_LABEL_LENGTH:
        return label
    digest = hashlib.sha256(json.dumps(changed, sort_keys=True).encode("utf-8")).hexdigest()[:8]
    return f"{name}-{digest}"


def parse_attribution_options(name: str, pairs: Iterable[str]) -> dict[str, Any]:
    """``--attribution-option`` ``key=value`` texts as the checked options of attribution ``name``."""
    options: dict[str, Any] = {}
    known = attribution_defaults(name)
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise OptionError(
                f"--attribution-option expects key=value, got {pair!r}",
                fix=f"{name}'s options are: {_known_options(name)}",
            )
        if key not in known:
            raise OptionError(
                f"attribution {name!r} has no option {key!r}", fix=f"its options are: {_known_options(name)}"
            )
        options[key] = parse_option_value(raw.strip())
    build_attribution(name, **options)  # the attribution checks its values now, before any work
    return options


def parse_option_value(text: str) -> Any:
    """``"50"`` → 50, ``"0.3"`` → 0.3, ``"true"``/``"false"`` → a bool (any case), anything else the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    return text


def describe_attributions() -> list[tuple[str, str, str]]:
    """``(name, options with defaults, first paragraph of its docstring)`` of every attribution."""
    rows = []
    for name, factory in ATTRIBUTIONS.items():
        options = ", ".join(
            key if default is inspect.Parameter.empty else f"{key}={default!r}"
            for key, default in attribution_defaults(name).items()
        )
        paragraph = (inspect.getdoc(factory) or "").strip().split("\n\n")[0]
        rows.append((name, options, " ".join(paragraph.split())))
    return rows


def per_image_generators(
    generator: torch.Generator | Sequence[torch.Generator], count: int
) -> list[torch.Generator]:
    """One generator per image: the given ``count`` of them, or the single one ``count`` times."""
    if isinstance(generator, torch.Generator):
        return [generator] * count
    generators = list(generator)
    if len(generators) != count:
        raise ValueError(f"{len(generators)} generators for {count} images")
    return generators


def _known_options(name: str) -> str:
    return ", ".join(attribution_defaults(name)) or "none"


def _option_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)
