"""What a result was made with: the Python, the platform, the processor and the installed version of every
package bgbias's requirements reach. Every run and report records it, so that ``bgbias report`` can say when
it compares results made under different installations (a new numpy or opencv, or another processor's math
kernels, can move the last digits of a figure; docs/design.md, *Reproducible installs*). And the backends an
installation may have swapped (onnxruntime, faiss): their GPU builds replace the CPU ones bgbias requires."""

from __future__ import annotations

import functools
import hashlib
import json
import platform
import re
import sys
from importlib import metadata
from types import ModuleType
from typing import Any

import torch
from packaging.requirements import Requirement

from bgbias.errors import AssetError, given
from bgbias.schema import Record

_EXTRA = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")

class InstallationRecord(Record):
    """An installation as runs and reports record it (:func:`installation`), for reading back."""

    python: str
    platform: str
    processor: str
    packages: dict[str, str]
    digest: str


TOOLING_EXTRAS = frozenset({"dev", "slurm"})
"""bgbias's extras that only build and test it (dev: pytest, ruff, …) or submit its work to a cluster (slurm:
submitit): they cannot change a figure."""

GPU_BUILDS = ("onnxruntime-gpu", "faiss-gpu-cu12")
"""The GPU builds of two of bgbias's requirements (onnxruntime, faiss-cpu), which a CUDA machine may install
in their place (docs/install.md, *GPU builds*): no requirement names them, so they are looked for by name.
Masks need neither: their torch backend runs on CUDA with the torch bgbias already has."""

INSTALL_ONNXRUNTIME = ("pip install onnxruntime (its GPU build, pip install onnxruntime-gpu, only to run "
                       "masks on onnxruntime or an ONNX model on a GPU; docs/install.md, GPU builds)")
"""How to get onnxruntime back, for the errors that need it."""


def import_onnxruntime() -> ModuleType:
    """onnxruntime (``bgbias masks --backend onnxruntime`` and the rembg models torch has no network for,
    ``--model x.onnx``), or an error naming the fix where it was removed."""
    try:
        import onnxruntime
    except ImportError:
        raise AssetError("onnxruntime is not installed: masks on the onnxruntime backend (and of the models "
                         "the torch backend has no network for) and ONNX models need it",
                         fix=INSTALL_ONNXRUNTIME) from None
    return onnxruntime


def import_onnx() -> ModuleType:
    """onnx (the torch backend of ``bgbias masks`` reads U²-Net's weights with it), or an error naming the fix
    where the installation lacks it."""
    try:
        import onnx
    except ImportError:
        raise AssetError("onnx is not installed: the torch backend of bgbias masks reads the U²-Net weights "
                         "with it",
                         fix="pip install onnx (a requirement of bgbias: reinstalling bgbias brings it), or "
                             f"pass {given('onnxruntime')}", parameter="backend") from None
    return onnx


@functools.cache
def installation() -> dict[str, Any]:
    """``{"python", "platform", "processor", "packages": {name: version}, "digest"}``; the digest (16 hex)
    pins the rest, so equal digests mean the same installation. Computed once per process."""
    record: dict[str, Any] = {
        "python": f"{sys.implementation.name} {platform.python_version()}",
        "platform": f"{sys.platform}-{platform.machine()}",
        "processor": processor(),
        "packages": installed_requirements(),
    }
    return {**record, "digest": installation_digest(record)}


RECORDED = ("python", "platform", "processor", "packages")
"""The parts of an installation record its digest pins and a comparison reads."""


def installation_digest(record: dict[str, Any]) -> str:
    """The 16-hex digest of an installation record's :data:`RECORDED` parts."""
    identity = {key: record.get(key) for key in RECORDED}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def _applies(requirement: str, extra: str) -> bool:
    """Whether ``requirement``'s environment marker holds here (with ``extra`` asked for): triton's
    ``importlib-metadata; python_version < "3.10"`` does not, though setuptools vendors a distribution of that
    name, which is found once setuptools has put its vendored folder on ``sys.path``."""
    marker = Requirement(requirement).marker
    return marker is None or marker.evaluate({"extra": extra})


def processor() -> str:
    """The CPU's model and the instruction set torch's kernels run with (``AMD EPYC, AVX512``): MKL and
    oneDNN take other paths on other vendors and vector widths, so the same seed trains to other digits."""
    model = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            model = next((line.partition(":")[2].strip() for line in cpuinfo
                          if line.startswith("model name")), model)
    except OSError:  # not Linux: platform.processor() is the best there is
        pass
    return f"{model or 'unknown'}, {torch.backends.cpu.get_cpu_capability()}"


def installed_requirements(root: str = "bgbias") -> dict[str, str]:
    """Installed version of ``root`` and of every distribution its requirements reach, by canonical name.

    ``root``'s extras count, except :data:`TOOLING_EXTRAS`, and so do :data:`GPU_BUILDS` where installed (a
    backend such as onnxruntime or faiss changes numbers); other distributions' extras do not (nobody asked
    for them). Where ``root`` is not installed as a distribution (run from a source tree), every installed
    distribution is recorded instead: more than needed, never less."""
    try:
        metadata.distribution(root)
    except metadata.PackageNotFoundError:
        return dict(sorted((_canonical(d.metadata["Name"]), d.version) for d in metadata.distributions()
                           if d.metadata["Name"]))
    found: dict[str, str] = {}
    pending = [root, *GPU_BUILDS]
    while pending:
        name = pending.pop()
        if name in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:  # an optional requirement that is not installed
            continue
        found[name] = dist.version
        for requirement in dist.requires or []:
            extra = _EXTRA.search(requirement)
            wanted = extra is None or (name == root and extra.group(1) not in TOOLING_EXTRAS)
            if wanted and _applies(requirement, extra.group(1) if extra else ""):
                pending.append(_canonical(Requirement(requirement).name))
    return dict(sorted(found.items()))


def _canonical(name: str) -> str:
    """A distribution name as PyPI compares them (PEP 503): lower case, runs of ``-_.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installation_differences(records: dict[str, dict[str, Any] | None]) -> list[str]:
    """Lines saying how the installations of several results differ, by result label; empty when they are
    all the same. A result whose record does not say (``None``: missing or damaged) is named as such."""
    known = {label: record for label, record in records.items() if record}
    unknown = sorted(label for label, record in records.items() if not record)
    digests = {installation_digest(record) for record in known.values()}
    lines: list[str] = []
    if len(digests) > 1:
        for key in ("python", "platform", "processor"):
            values = {label: str(record.get(key)) for label, record in known.items()}
            if len(set(values.values())) > 1:
                lines.append(f"{key}: " + _by_value(values))
        names = sorted({name for record in known.values() for name in record.get("packages", {})})
        for name in names:
            values = {label: record.get("packages", {}).get(name, "not installed")
                      for label, record in known.items()}
            if len(set(values.values())) > 1:
                lines.append(f"{name}: " + _by_value(values))
    if unknown and known:
        lines.append(f"not recorded (the result's record is missing or damaged): {', '.join(unknown)}")
    return lines


def _by_value(values: dict[str, str]) -> str:
    """``2.4.6 (run a, run b); 2.5.0 (run c)``: the labels grouped by their value."""
    groups: dict[str, list[str]] = {}
    for label, value in sorted(values.items()):
        groups.setdefault(value, []).append(label)
    return "; ".join(f"{value} ({', '.join(labels)})" for value, labels in sorted(groups.items()))
