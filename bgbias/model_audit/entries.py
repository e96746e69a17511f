"""Which models an audit scores, and under which labels: ``--model`` values, the lines of a ``--models`` list
file (``[LABEL =] SPEC [KEY=VALUE ...]``, split as a shell splits words; docs/audit.md), or models in memory.

Labels and specs come from a user's file, so they are only ever shown as text, and a model's folder is named
by a slug of its label and a digest, never by the label itself. A factory a list file names is Python that
loading would import and call, so such a line is refused unless its user trusts the file (``--trust-model``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bgbias.engine.model_spec import is_factory, parse_model_args
from bgbias.errors import PARAMETER, BgbiasError, OptionError, given

SLUG_LENGTH = 40
ENTRY_FORM = "[LABEL =] SPEC [KEY=VALUE ...]"


@dataclass(frozen=True)
class ModelEntry:
    """One model of an audit: its ``label``, the ``model`` (a spec's text, or an object in memory), a
    factory's ``args``, the ``spec`` as records show it, and where it was given (``--model 2``, a list
    file's line)."""

    label: str
    model: Any
    spec: str
    where: str
    args: dict[str, Any] = field(default_factory=dict)

    def folder_name(self) -> str:
        """The model's folder under the audit's: a slug of the label (letters, digits, ``_.+-``) and 8 hex of
        the label, spec and arguments, so two labels never share a folder and no label names a path."""
        slug = re.sub(r"[^A-Za-z0-9_.+-]+", "_", self.label).strip("._-")[:SLUG_LENGTH] or "model"
        identity = json.dumps([self.label, self.spec, self.args], sort_keys=True, default=str)
        return f"{slug}-{hashlib.sha256(identity.encode()).hexdigest()[:8]}"


def parse_entry(text: str, where: str, *, comments: bool = False) -> ModelEntry | None:
    """The entry ``text`` writes (None for a blank or comment-only line), else an ``OptionError`` naming
    ``where``."""
    try:
        words = shlex.split(text, comments=comments)
    except ValueError as err:
        raise OptionError(f"{where}: {err} in {text.strip()!r}", fix=f"write it as {ENTRY_FORM}") from None
    if not words:
        return None
    label = None
    if len(words) >= 2 and words[1] == "=":
        label, words = words[0], words[2:]
        if not label.strip():
            raise OptionError(f"{where}: the label before '=' is empty", fix=f"write it as {ENTRY_FORM}")
    if not words or "=" in words[0]:
        raise OptionError(f"{where}: no model spec in {text.strip()!r}",
                          fix=f"write it as {ENTRY_FORM}, with spaces around the '=' after a label")
    spec, pairs = words[0], words[1:]
    try:
        args = parse_model_args(pairs)
    except BgbiasError as err:
        raise OptionError(f"{where}: {err.problem}", fix=f"write it as {ENTRY_FORM}") from None
    written = shlex.join([spec, *pairs])
    return ModelEntry(label if label is not None else written, spec, written, where, args)


def read_list_file(path: str | os.PathLike[str], *, trust: bool = False) -> list[ModelEntry]:
    """The entries of a list file, one per line (blank lines and ``#`` comments skipped); a line that is no
    entry, or (unless ``trust``) that names a factory, is an ``OptionError`` naming the file and the line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()  # a byte order mark is no part of line 1
    except (OSError, UnicodeDecodeError) as err:
        raise OptionError(f"the list of models cannot be read ({err})", path=path,
                          fix=f"pass {PARAMETER} a UTF-8 text file with one {ENTRY_FORM} per line",
                          parameter="models_file") from None
    entries = []
    for number, line in enumerate(lines, 1):
        try:
            entry = parse_entry(line, f"line {number}", comments=True)
        except OptionError as err:
            raise OptionError(err.problem, path=path, fix=err.fix) from None
        if entry is not None and not trust and is_factory(entry.model):
            raise OptionError(
                f"line {number} names the factory {entry.model}, which loading it would import and call: "
                "Python code, and a list file may come from someone else", path=path,
                fix=f"pass {given(True)} if you wrote this file or trust every factory it names as you "
                    "would its Python code; or give that model on its own", parameter="trust_model")
        if entry is not None:
            entries.append(dataclasses.replace(entry, where=f"{path}, line {number}"))
    return entries


def in_memory_entry(label: str | None, model: Any, where: str) -> ModelEntry:
    """An entry for a model given from Python: a spec's text is parsed as a ``--model`` value; anything else
    (a ``torch.nn.Module``, an embedding model, a function) is labelled ``label``, else by its class."""
    if isinstance(model, str | os.PathLike):
        entry = parse_entry(os.fspath(model), where)
        if entry is None:
            raise OptionError(f"{where} is empty", fix="name a model spec, or leave the entry out")
        return entry if label is None else dataclasses.replace(entry, label=label)
    name = type(model).__name__
    describe = getattr(model, "describe", None)
    if callable(describe):
        name = str(describe().get("method", name))
    elif not hasattr(model, "parameters"):
        name = getattr(model, "__qualname__", name)
    return ModelEntry(label if label is not None else name, model, f"<in memory: {name}>", where)


def entries_of(models: Iterable[Any] | Mapping[str, Any]) -> list[ModelEntry]:
    """Python's ``models=``: a mapping of label to model, or models (specs or objects) in a row."""
    if isinstance(models, Mapping):
        for label in models:
            if not isinstance(label, str) or not label.strip():
                raise OptionError(f"models= has the label {label!r}; labels are non-empty strings",
                                  fix='pass models={"label": model, ...}')
        return [in_memory_entry(label, model, f"models[{label!r}]") for label, model in models.items()]
    if isinstance(models, str | os.PathLike):
        models = [models]
    return [in_memory_entry(None, model, f"models[{index}]") for index, model in enumerate(models)]


def check_labels(entries: list[ModelEntry]) -> None:
    """No model without a label, and no label twice: an ``OptionError`` naming both places."""
    if not entries:
        raise OptionError("no model to audit", fix=f"name the models, or pass {given('FILE')} listing them",
                          parameter="models_file")
    seen: dict[str, ModelEntry] = {}
    for entry in entries:
        if entry.label in seen:
            first = seen[entry.label]
            raise OptionError(f"the label {entry.label!r} is given twice: {first.where} ({first.spec}) and "
                              f"{entry.where} ({entry.spec})",
                              fix="give each model a label of its own (LABEL = SPEC)")
        seen[entry.label] = entry
