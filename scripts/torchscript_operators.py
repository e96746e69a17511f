"""Make bgbias/configs/torchscript-operators.json, the operators an outside TorchScript model may use
(bgbias/engine/torchscript_guard.py, docs/design.md *Models bgbias did not train*).

The list is what real vision models use: every family of torchvision's classification models (its smallest
variant: the operators do not change with the width or depth), every bgbias backbone and every bgbias method
(as `bgbias eval --model` users export them: the method's `embed`), and a few heads common in metric
learning (L2 normalisation, GeM pooling, attention pooling, resizing inside the model), each scripted where
scripting works and traced. A maintainer reruns it after a torch upgrade (operators get new names) or to admit
another family, reviews the diff, and commits the file:

    .venv/bin/python scripts/torchscript_operators.py

It refuses to write a list holding an operator that touches files, processes, threads or the network.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torchvision
from torch import nn
from torch.nn import functional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bgbias.engine.torchscript_guard import OPERATORS_FILE, script_operators

TORCHVISION_FAMILIES = (
    "alexnet", "convnext_tiny", "densenet121", "efficientnet_b0", "efficientnet_v2_s", "googlenet",
    "inception_v3", "maxvit_t", "mnasnet0_5", "mobilenet_v2", "mobilenet_v3_small", "regnet_x_400mf",
    "regnet_y_400mf", "resnet18", "resnext50_32x4d", "shufflenet_v2_x0_5", "squeezenet1_0", "swin_t",
    "swin_v2_t", "vgg11", "vgg11_bn", "vit_b_16", "wide_resnet50_2",
)
"""One model of each family of torchvision's classification models."""

NAMESPACES = ("aten::", "prim::")
"""The namespaces of the list: torch's tensor and control-flow operators, none of RPC, c10d, profiler or a
third-party library."""

NEVER = ("from_file", "save", "load", "rpc", "c10d", "distributed", "fork", "wait", "thread", "Print",
         "PythonOp", "CallFunction", "CallMethod", "CreateObject", "_nnapi", "profiler", "record_function")
"""Fragments of operator names that must never be on the list: a second line of defence (none of the models
above uses such operators, and the list is refused if one ever does)."""


class Normalized(nn.Module):
    """A backbone's pooled features, L2-normalised (the usual embedding head)."""

    def __init__(self, body: nn.Module):
        super().__init__()
        self.body = body

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return functional.normalize(self.body(images), dim=1)


class GeM(nn.Module):
    """Generalised-mean pooling (Radenović et al.), on a resized input."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.p = nn.Parameter(torch.ones(1) * 3)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        images = functional.interpolate(images, size=(64, 64), mode="bilinear", align_corners=False)
        features = self.conv(images).clamp(min=1e-6).pow(self.p)
        return functional.avg_pool2d(features, features.shape[-2:]).pow(1.0 / self.p).flatten(1)


class AttentionPool(nn.Module):
    """Attention pooling of a feature map by a learned query, softmax-weighted, with einsum."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.query = nn.Parameter(torch.randn(8))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        features = self.conv(images).flatten(2)
        weights = torch.softmax(torch.einsum("bcn,c->bn", features, self.query), dim=1)
        return torch.einsum("bcn,bn->bc", features, weights)


class Embed(nn.Module):
    """A bgbias method's ``embed`` as a module, as users export it."""

    def __init__(self, method: nn.Module):
        super().__init__()
        self.method = method

    def forward(self, images: torch.Tensor):
        return self.method.embed(images)


def models() -> Iterator[tuple[str, Callable[[], nn.Module], int]]:
    """(name, builder, input side) of every model the list is made from."""
    from bgbias.engine.config import resolve_config
    from bgbias.methods.base import MethodSpec
    from bgbias.methods.registry import method_class, method_names
    from bgbias.models.registry import backbone_names, build_backbone

    models_module = torchvision.models
    for family in TORCHVISION_FAMILIES:
        yield (f"torchvision {family}", lambda family=family: getattr(models_module, family)(weights=None),
               299 if family == "inception_v3" else 224)
    for backbone in backbone_names():
        def method_on(backbone: str = backbone, method: str = "multi_similarity", side: int = 227):
            defaults = resolve_config(method, "folder").loss
            spec = MethodSpec(16, 4, 8, options=defaults, input_size=side)
            return Embed(method_class(method)(build_backbone(backbone, pretrained=False), spec))
        yield f"bgbias multi_similarity on {backbone}", method_on, 227
    for method in method_names():
        def tiny(method: str = method):
            defaults = resolve_config(method, "folder").loss
            spec = MethodSpec(16, 4, 8, options=defaults, input_size=32)
            return Embed(method_class(method)(build_backbone("tiny_cnn", pretrained=False), spec))
        yield f"bgbias {method} on tiny_cnn", tiny, 32
    resnet = models_module.resnet18
    yield "L2-normalised resnet18", lambda: Normalized(resnet(weights=None, num_classes=64)), 224
    yield "GeM pooling", GeM, 64
    yield "attention pooling", AttentionPool, 32


def collect() -> tuple[dict[str, str], list[str]]:
    """Each operator with the first model that uses it, and the models scripted or traced."""
    operators: dict[str, str] = {}
    made: list[str] = []
    for name, build, side in models():
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torchvision's notes on weight initialisation
            model = build().eval()
        for how in ("scripted", "traced"):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    if how == "scripted":
                        compiled = torch.jit.script(model)
                    else:
                        with torch.no_grad():
                            compiled = torch.jit.trace(model, torch.rand(2, 3, side, side), strict=False,
                                                       check_trace=False)
            except Exception as err:  # scripting fails on much Python that tracing takes
                print(f"{name}: not {how} ({type(err).__name__})", file=sys.stderr)
                continue
            for operator in script_operators(compiled):
                operators.setdefault(operator, f"{name} ({how})")
            made.append(f"{name} ({how})")
            print(f"{name}: {how}, {len(operators)} operators so far", file=sys.stderr)
    return operators, made


def main() -> None:
    operators, made = collect()
    forbidden = sorted(op for op in operators
                       if not op.startswith(NAMESPACES) or any(part.lower() in op.lower() for part in NEVER))
    if forbidden:
        raise SystemExit(f"refusing to list {', '.join(forbidden)}: review which model brings them")
    record = {"torch": torch.__version__, "made_by": "scripts/torchscript_operators.py", "models": made,
              "operators": dict(sorted(operators.items()))}
    OPERATORS_FILE.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(operators)} operators from {len(made)} models in {OPERATORS_FILE}", file=sys.stderr)


if __name__ == "__main__":
    main()
