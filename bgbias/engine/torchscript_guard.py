"""A TorchScript file from elsewhere, checked before bgbias runs any of it: it may compute with tensors and
nothing else (docs/design.md, *Models bgbias did not train*).

``torch.jit.load`` already runs part of the file: ``__setstate__`` in its code and that of torch's C++ classes
its pickles hold (``aten.OpaqueObject`` unpickles any Python object). So :func:`check_archive` refuses those
before loading, and :func:`check_operators` checks every operator, calls inlined, against an allowlist
(``bgbias/configs/torchscript-operators.json``, from ``scripts/torchscript_operators.py``) before any call: an
operator torch adds later is refused, not run. ``--trust-model`` skips both for one's own files.
"""

from __future__ import annotations

import functools
import json
import pickletools
from pathlib import Path
from typing import Any

import torch

from bgbias.errors import ModelError, given

OPERATORS_FILE = Path(__file__).resolve().parents[1] / "configs" / "torchscript-operators.json"

CPP_CLASSES = "__torch__.torch.classes"

TRUST = ("if you made this file yourself, or trust whoever did as you would trust their Python code, pass "
         f"{given(True)} to run it unchecked; otherwise do not run it")

SHOWN = 5


@functools.cache
def allowed_operators() -> frozenset[str]:
    return frozenset(json.loads(OPERATORS_FILE.read_text(encoding="utf-8"))["operators"])


def check_archive(path: Path) -> None:
    """Refuse, before loading, an archive whose loading would run code of its own: a ``__setstate__`` in its
    code, an object of a C++ class in its pickles, or a pickle that cannot be read."""
    try:
        reader = torch._C.PyTorchFileReader(str(path))
        names = reader.get_all_records()
    except RuntimeError as err:
        raise ModelError(f"torch cannot read this TorchScript archive: {str(err).splitlines()[0]}", path=path,
                         fix="save it again with torch.jit.save") from None
    for name in names:
        if name.endswith(".py") and b"__setstate__" in bytes(reader.get_record(name)):
            raise ModelError(
                f"the model's code ({name} in the archive) defines __setstate__, which torch.jit.load runs "
                "while loading the file, before anything could check it", path=path,
                fix=f"{TRUST} (or export the model without a __setstate__)", parameter="trust_model")
        if name.endswith((".pkl", ".debug_pkl")):
            for problem in _pickle_problems(bytes(reader.get_record(name))):
                raise ModelError(f"{problem} ({name} in the archive)", path=path, fix=TRUST,
                                 parameter="trust_model")


def _pickle_problems(data: bytes) -> list[str]:
    """What in one of the archive's pickles would run code while loading, or hide a name (``STACK_GLOBAL``,
    which ``torch.jit.save`` never writes)."""
    try:
        operations = list(pickletools.genops(data))
    except Exception as err:  # pickletools raises ValueError and friends on damaged or crafted bytes
        return [f"a pickle of the archive cannot be read ({type(err).__name__}: {err})"]
    for opcode, argument, _position in operations:
        if opcode.name == "STACK_GLOBAL":
            return ["a pickle of the archive names a class in a way torch.jit.save never writes "
                    "(STACK_GLOBAL)"]
        if opcode.name in ("GLOBAL", "INST") and str(argument).replace(" ", ".").startswith(CPP_CLASSES):
            cls = str(argument).replace(" ", ".")[len("__torch__."):]
            return [f"the model holds an object of torch's C++ class {cls}, whose loading runs code on the "
                    "file's data (torch.classes.aten.OpaqueObject, for one, unpickles any Python object)"]
    return []


def check_operators(module: torch.jit.ScriptModule, path: Path) -> None:
    """Refuse a loaded archive that uses an operator off the allowlist, naming each and where it sits."""
    allowed = allowed_operators()
    refused = {op: where for op, where in script_operators(module).items() if op not in allowed}
    if not refused:
        return
    shown = "; ".join(f"{op} (in {where})" for op, where in list(refused.items())[:SHOWN])
    more = f" and {len(refused) - SHOWN} more" if len(refused) > SHOWN else ""
    raise ModelError(
        f"the model uses operators that are not tensor computations bgbias lets an outside model run: "
        f"{shown}{more}. Such operators can read or write files, start processes or reach the network; "
        "bgbias runs none of the file", path=path, fix=TRUST, parameter="trust_model")


def script_operators(module: torch.jit.ScriptModule) -> dict[str, str]:
    """Every operator a scripted or traced module's code can run (every method and hook of every submodule,
    inlined, with blocks and subgraphs), each with the first ``submodule.method`` it sits in."""
    found: dict[str, str] = {}
    for name, sub in module.named_modules():
        owner = name or "<model>"
        graphs = [(method, sub._c._get_method(method).graph) for method in sub._c._method_names()]
        graphs += [(f"hook {hook.name}", hook.graph)
                   for hook in [*sub._c._get_forward_pre_hooks(), *sub._c._get_forward_hooks()]]
        for method, graph in graphs:
            inlined = graph.copy()
            torch._C._jit_pass_inline(inlined)
            _collect(inlined, found, f"{owner}.{method}")
    return found


def _collect(graph: Any, found: dict[str, str], where: str) -> None:
    for node in graph.nodes():
        found.setdefault(node.kind(), where)
        for block in node.blocks():
            _collect(block, found, where)
        for attribute in node.attributeNames():
            kind = node.kindOf(attribute)
            subgraphs = [node.g(attribute)] if kind == "g" else node.gs(attribute) if kind == "gs" else []
            for subgraph in subgraphs:
                _collect(subgraph, found, where)
