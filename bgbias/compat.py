"""Import shims for broken environments, applied only when the plain import fails with the known error."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

_torchvision_ops: Any = None  # keeps the operator-schema Library alive for the life of the process


def import_torchvision() -> ModuleType:
    """Import torchvision, also when a CUDA build of it sits on a CPU-only torch.

    The CUDA torchvision wheel registers kernels for ``torchvision::nms``/``qnms`` whose schemas a CPU torch
    never defines, so ``import torchvision`` raises
    ``RuntimeError: operator torchvision::nms does not exist``.
    Defining the two schemas first lets the import succeed; models, transforms and datasets work,
    ``torchvision.ops`` does not. Normal installs take the first ``import`` and are untouched.
    """
    global _torchvision_ops
    try:
        return importlib.import_module("torchvision")
    except RuntimeError as err:
        if "torchvision::nms does not exist" not in str(err):
            raise
    import sys

    import torch

    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]
    _torchvision_ops = torch.library.Library("torchvision", "DEF")
    for op in ("nms", "qnms"):
        _torchvision_ops.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    return importlib.import_module("torchvision")
