"""The method registry: ``@register_method("name")`` on a :class:`~bgbias.methods.base.Method` subclass.

Names are what ``bgbias train --method`` accepts. The modules that define methods are imported on first
use, so registering a new method means adding its module to ``_METHOD_MODULES``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from bgbias.errors import OptionError

if TYPE_CHECKING:
    from bgbias.methods.base import Method

_METHOD_MODULES = ("bgbias.methods.baselines", "bgbias.methods.dcml.method")
_REGISTRY: dict[str, type[Method]] = {}

M = TypeVar("M", bound="type[Method]")


def register_method(name: str) -> Callable[[M], M]:
    """Class decorator: make a Method subclass available as ``name``."""

    def decorate(cls: M) -> M:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            taken = _REGISTRY[name].__name__
            raise ValueError(f"method {name!r} is registered twice: {taken} and {cls.__name__}")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorate


def method_names() -> list[str]:
    """Every registered method, sorted."""
    _import_methods()
    return sorted(_REGISTRY)


def method_class(name: str) -> type[Method]:
    """The class registered as ``name``; an unknown name is an OptionError listing the known ones."""
    _import_methods()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise OptionError(
            f"unknown method {name!r}", fix=f"use one of: {', '.join(sorted(_REGISTRY))}"
        ) from None


def _import_methods() -> None:
    for module in _METHOD_MODULES:
        importlib.import_module(module)
