"""A TorchScript file from elsewhere, checked before bgbias runs any of it: it may compute with tensors and
nothing else (docs/design.md, *Models bgbias did not train*).

TorchScript is a program, not data. A scripted module can call ``torch.from_file`` (read and overwrite any
file the user can write), ``torch.save``, RPC and distributed operators; and ``torch.jit.load`` already runs
part of the file while loading: the ``__setstate__`` of any class or module in its code, and that of torch's
C++ classes (``torch.classes.*``) whose objects its pickles hold, one of which (``aten.OpaqueObject``)
unpickles a Python object, so it runs any code the file brings. Hence two checks:

1. before loading (:func:`check_archive`), reading the records with torch's own archive reader, so exactly
   what ``torch.jit.load`` will read: no ``__setstate__`` in the archive's code, and no C++ class among the
   objects of its pickles;
2. after loading and before any call (:func:`check_operators`): every operator of every method and hook of
   every submodule, with the calls between them inlined, must be on the allowlist
   ``bgbias/configs/torchscript-operators.json``: the operators that the classification models of torchvision
   (every family, scripted and traced) and bgbias's own exported models use, as
   ``scripts/torchscript_operators.py`` collects them. An allowlist rather than a list of dangerous
   operators: torch adds operators with every release, and an operator nobody listed is refused, not run.

``--trust-model`` (``trust_model=True``) skips both for one's own files.
"""

from __future__ import annotations

import functools
import json
import pickletools
from pathlib import Path
from typing import Any

import torch

from bgbias.errors import PARAMETER, ModelError

OPERATORS_FILE = Path(__file__).resolve().parents[1] / "configs" / "torchscript-operators.json"
"""The allowlist: ``{"torch": the version it was made with, "models": [...], "operators": {name: the first
model using it}}``."""

CPP_CLASSES = "__torch__.torch.classes"
"""The qualified-name prefix of torch's C++ classes, whose ``__setstate__`` runs while an archive loads."""

TRUST = ("if you made this file yourself, or trust whoever did as you would trust their Python code, pass "
         f"{PARAMETER}True to run it unchecked; otherwise do not run it")
"""The fix of every refusal."""

SHOWN = 5
"""Refused operators named in one message."""


@functools.cache
def allowed_operators() -> frozenset[str]:
    """The operator names an outside TorchScript model may use."""
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
    """What in one of the archive's pickles would run code while loading: an object of a C++ class (its
    ``__setstate__`` runs on the file's data), a global given by ``STACK_GLOBAL`` (which ``torch.jit.save``
    never writes and which would hide the name), or bytes that are no pickle."""
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
    """Refuse a loaded archive any of whose methods uses an operator off the allowlist, naming each such
    operator and where it sits."""
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
    """Every operator a scripted or traced module's code can run, each with the first place it sits
    (``submodule.method``, the top module as ``<model>``): every method and forward hook of every submodule,
    with the calls between them inlined, including the blocks of branches and loops and any subgraph."""
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
    """Add the operator of every node of ``graph`` (or a block), its blocks and its subgraphs."""
    for node in graph.nodes():
        found.setdefault(node.kind(), where)
        for block in node.blocks():
            _collect(block, found, where)
        for attribute in node.attributeNames():
            kind = node.kindOf(attribute)
            subgraphs = [node.g(attribute)] if kind == "g" else node.gs(attribute) if kind == "gs" else []
            for subgraph in subgraphs:
                _collect(subgraph, found, where)
