"""The method registry: ``@register_method("name")`` on a :class:`~bgbias.methods.base.Method` subclass; a new
method's module goes into ``METHOD_MODULES``, which are imported on first use."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from bgbias.registry import Registry

if TYPE_CHECKING:
    from bgbias.methods.base import Method

METHOD_MODULES = ("bgbias.methods.baselines", "bgbias.methods.dcml.method", "bgbias.methods.sam.method",
                  "bgbias.methods.metricformer.method", "bgbias.methods.avsl.method")
"""The modules of the built-in methods, imported on the first read of ``METHODS`` (and of the attribution
registry, so an attribution a method package registers is found by name too)."""

METHODS: Registry[type[Method]] = Registry("method", METHOD_MODULES, name_attribute="name")

M = TypeVar("M", bound="type[Method]")


def register_method(name: str) -> Callable[[M], M]:
    """Class decorator: make a Method subclass available as ``name`` (and set its ``name``)."""
    return METHODS.register(name)


def method_names() -> list[str]:
    return sorted(METHODS)


def describe_methods() -> list[tuple[str, str]]:
    """``(name, its options with their defaults)`` of every registered method, sorted by name."""
    return [(name, METHODS[name].describe_options()) for name in method_names()]


def method_class(name: str) -> type[Method]:
    """The class registered as ``name``; an unknown name is an OptionError listing the known ones."""
    return METHODS[name]
