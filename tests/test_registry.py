"""The generic registry: registration, lookup errors, order, duplicates and lazy built-in modules."""

from __future__ import annotations

import importlib
import sys

import pytest

from bgbias.errors import OptionError
from bgbias.registry import Registry


class Thing:
    pass


class Other:
    pass


def test_register_and_look_up_in_registration_order():
    things: Registry[type] = Registry("thing", name_attribute="name")
    things.register("b")(Thing)
    things.register("a")(Other)
    assert things["b"] is Thing and Other.name == "a"
    assert things.names() == ("b", "a") and list(things) == ["b", "a"] and len(things) == 2
    assert "a" in things and "c" not in things
    assert things.items() == [("b", Thing), ("a", Other)]


def test_an_unknown_name_lists_the_known_ones_and_suggests_the_closest():
    things: Registry[type] = Registry("thing")
    things.register("triplet")(Thing)
    things.register("arcface")(Other)
    with pytest.raises(OptionError, match="unknown thing 'triplett'") as raised:
        things["triplett"]
    assert raised.value.fix == "did you mean 'triplet'? use one of: triplet, arcface"
    with pytest.raises(OptionError) as raised:
        things["zzz"]
    assert raised.value.fix == "use one of: triplet, arcface"


def test_a_taken_name_is_refused_but_the_same_object_again_is_fine():
    things: Registry[type] = Registry("thing")
    things.register("a")(Thing)
    things.register("a")(Thing)  # a module imported twice
    with pytest.raises(ValueError, match="thing 'a' is registered twice: Thing is already registered"):
        things.register("a")(Other)
    assert things["a"] is Thing


def test_unregister_takes_an_entry_out():
    things: Registry[type] = Registry("thing")
    things.register("a")(Thing)
    things.register("b")(Other)
    assert things.unregister("a") is Thing
    assert things.names() == ("b",)
    with pytest.raises(OptionError, match="unknown thing 'a'"):
        things.unregister("a")
    things.register("a")(Other)  # the name is free again
    assert things["a"] is Other


def test_a_copy_is_independent():
    things: Registry[type] = Registry("thing")
    things.register("a")(Thing)
    copy = things.copy()
    copy.register("b")(Other)
    assert things.names() == ("a",) and copy.names() == ("a", "b")


def test_built_in_modules_load_on_first_read_and_keep_their_order(tmp_path, monkeypatch):
    modules = ("bgbias_registry_first", "bgbias_registry_second")
    lazy: Registry[type] = Registry("thing", modules)
    monkeypatch.setattr(sys.modules[__name__], "LAZY", lazy, raising=False)
    for module, cls in zip(modules, ("A", "B"), strict=True):
        (tmp_path / f"{module}.py").write_text(
            f"from {__name__} import LAZY\n\n\n@LAZY.register({cls.lower()!r})\nclass {cls}:\n    pass\n"
        )
        monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    lazy.register("late")(Thing)  # from elsewhere, before the built-ins are loaded
    importlib.import_module(modules[1])  # someone imports the second module first: it registers first
    assert modules[0] not in sys.modules
    assert lazy.names() == ("a", "b", "late")
    assert modules[0] in sys.modules
