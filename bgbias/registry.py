"""One registry for everything chosen by name: methods, backbones, attribution methods and datasets.

Built-in entries are imported on the first read (a registry can name modules that import torch without
loading them), and come out in the order of those modules, then entries from elsewhere: the order never
depends on which module a program imported first. An unknown name is an ``OptionError`` listing the known.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from bgbias.errors import OptionError

T = TypeVar("T")
X = TypeVar("X")


class Registry(Generic[T]):
    """Names → objects of one ``kind`` (the word errors use: "method", "dataset", ...).

    ``modules`` are imported on the first read and hold the built-in entries. With ``name_attribute``, each
    registered object gets its name in that attribute (a method or dataset class knows its own name).
    """

    def __init__(self, kind: str, modules: Sequence[str] = (), *, name_attribute: str | None = None):
        self.kind = kind
        self.modules = tuple(modules)
        self.name_attribute = name_attribute
        self._entries: dict[str, T] = {}
        self._loaded = False

    def register(self, name: str) -> Callable[[X], X]:
        """Decorator: make the object available as ``name``. Registering the same object again (a module
        imported twice) is harmless; another object under a taken name is a ``ValueError``."""

        def decorate(obj: X) -> X:
            taken = self._entries.get(name)
            if taken is not None and taken is not obj:
                raise ValueError(
                    f"{self.kind} {name!r} is registered twice: {_label(taken)} is already registered under "
                    f"that name, so {_label(obj)} cannot be"
                )
            if self.name_attribute is not None:
                setattr(obj, self.name_attribute, name)
            self._entries[name] = obj  # type: ignore[assignment]
            return obj

        return decorate

    def unregister(self, name: str) -> T:
        """Remove ``name`` and return its object (a test undoing its throwaway entry); an unknown name is an
        ``OptionError`` listing the known ones."""
        self._load()
        try:
            return self._entries.pop(name)
        except KeyError:
            raise self.unknown(name) from None

    def __getitem__(self, name: str) -> T:
        """The object registered as ``name``; an unknown name is an ``OptionError`` listing the known ones."""
        self._load()
        try:
            return self._entries[name]
        except KeyError:
            raise self.unknown(name) from None

    def unknown(self, name: str) -> OptionError:
        """The error for a name that is not registered: the known names, and the closest one if any."""
        names = self.names()
        close = difflib.get_close_matches(name, names, n=1) if isinstance(name, str) else []
        hint = f"did you mean {close[0]!r}? " if close else ""
        return OptionError(f"unknown {self.kind} {name!r}", fix=f"{hint}use one of: {', '.join(names)}")

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        self._load()
        return len(self._entries)

    def names(self) -> tuple[str, ...]:
        """Every registered name: the built-in modules' entries in module order, then the others."""
        self._load()
        rank = {module: index for index, module in enumerate(self.modules)}
        # sorted() is stable: the entries of one module (or from elsewhere) keep the order of registration
        return tuple(sorted(self._entries, key=lambda name: rank.get(
            getattr(self._entries[name], "__module__", None), len(rank))))

    def items(self) -> list[tuple[str, T]]:
        """``(name, object)`` pairs in the order of :meth:`names`."""
        return [(name, self._entries[name]) for name in self.names()]

    def copy(self) -> Registry[T]:
        """An independent registry with the same entries (tests register into a copy)."""
        self._load()
        clone: Registry[T] = Registry(self.kind, self.modules, name_attribute=self.name_attribute)
        clone._entries = dict(self._entries)
        clone._loaded = True
        return clone

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self._entries)})"

    def _load(self) -> None:
        if not self._loaded:
            for module in self.modules:
                importlib.import_module(module)
            self._loaded = True


def _label(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or repr(obj)
