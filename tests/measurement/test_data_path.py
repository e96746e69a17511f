"""The evaluation's data path (docs/design.md, *The evaluation's data path*): a request goes down the layers
once. The calls of an evaluation with corrupted repeats and the profile are traced, and the bgbias modules
whose functions receive the request or its resolved form must each be entered once, in layer order, and be
the list the design page gives."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest

import bgbias
from bgbias.engine.trained import load_trained
from bgbias.measurement.request import MeasureRequest, ResolvedRequest

ROOT = Path(__file__).resolve().parents[2]
SECTION = "### The evaluation's data path"


def documented_path() -> list[str]:
    """The numbered list of modules under the design page's section on the evaluation's data path."""
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    section = text.split(SECTION, 1)[1].split("\n#", 1)[0]
    return re.findall(r"^\d+\. `(bgbias\.[\w.]+)`", section, re.M)


def layer_of(module: str) -> int:
    """The module's layer as the import contract lists them, 0 the highest."""
    contract = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]
    for index, layer in enumerate(contract["layers"]):
        if any(module == name or module.startswith(name + ".") for name in layer.split(" : ")):
            return index
    raise AssertionError(f"{module} is in no layer of the import contract")


def modules_entered(call, kinds: tuple[type, ...]) -> list[str]:
    """The bgbias modules whose functions ``call`` calls with an argument of one of ``kinds``, one entry per
    run of calls into the same module (a method's own ``self`` does not count: an object's methods are not a
    step of its path)."""
    entered: list[str] = []

    def profile(frame, event, _arg):
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("bgbias."):
            return
        code = frame.f_code
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        received = any(name != "self" and isinstance(frame.f_locals.get(name), kinds) for name in names)
        if received and (not entered or entered[-1] != module):
            entered.append(module)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return entered


def test_the_documented_path_is_short_and_goes_down_the_layers():
    path = documented_path()
    assert 3 <= len(path) <= 12
    layers = [layer_of(module) for module in path]
    assert layers == sorted(layers)


@pytest.mark.slow
@pytest.mark.parametrize("profile", [False, True])
def test_an_evaluation_enters_each_module_of_the_documented_path_once_going_down(tiny_run, tiny_bench,
                                                                                 tmp_path, profile):
    model = load_trained(tiny_run, device="cpu")

    def evaluate():
        bgbias.evaluate(model, "bench", root=tiny_bench / "bench", masks=tiny_bench / "masks",
                        backgrounds=tiny_bench / "backgrounds", manifests=tmp_path / "manifests",
                        corrupted=True, repeats=2, profile=profile, worst_k=2, workers=0)

    entered = modules_entered(evaluate, (MeasureRequest, ResolvedRequest))
    assert len(entered) == len(set(entered)), f"a module entered twice: {entered}"
    assert entered == documented_path()
