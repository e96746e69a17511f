"""rembg's U²-Net ONNX files as weights of :class:`~bgbias.saliency.u2net_network.U2Net`, parsed as protobuf:
nothing is executed or unpickled, so a file from anyone can be checked and loaded.

The exporter folded each batch norm into its convolution and numbered those tensors; only the side and fusion
convolutions kept their names. So convolutions match by name where they have one, else in graph order, and
every match is checked (shapes, kernel, dilation, padding, stride, groups); every initializer must land on
exactly one parameter and every parameter get one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from google.protobuf.message import DecodeError
from onnx import AttributeProto, helper, numpy_helper
from torch import nn

from bgbias.errors import AssetError
from bgbias.installation import import_onnx
from bgbias.saliency.u2net_network import ResidualUBlock, U2Net, U2NetShape


@dataclass(frozen=True)
class FileConv:
    """One Conv node of the file: its weight and bias initializers and its attributes."""

    weight: str
    bias: str | None
    kernel: tuple[int, ...]
    dilation: tuple[int, ...]
    padding: tuple[int, ...]
    stride: tuple[int, ...]
    groups: int


CONV_ATTRIBUTE_TYPES = {"kernel_shape": "INTS", "dilations": "INTS", "pads": "INTS", "strides": "INTS",
                        "group": "INT"}
"""The ONNX type of each Conv attribute read: another type is a damaged file."""

NAMED = {f"side{index}": f"side.{index - 1}" for index in range(1, 7)} | {"outconv": "fuse"}
"""The convolutions the file names (U²-Net's side and fusion layers) and what the module calls them."""


def load_u2net(path: str | os.PathLike[str], shape: U2NetShape, *, fix: str) -> U2Net:
    """A :class:`U2Net` of ``shape`` in eval mode with the weights of the ONNX file ``path``; an
    ``AssetError`` naming the file and ``fix`` if the file does not hold exactly that network."""
    path = Path(path)
    model = U2Net(shape).eval()
    tensors, convs = read_onnx(path, fix=fix)
    state = map_weights(model, tensors, convs, path=path, fix=fix)
    model.load_state_dict(state, strict=True)
    return model


def read_onnx(path: Path, *, fix: str) -> tuple[dict[str, np.ndarray], list[FileConv]]:
    """The file's initializers (float32 arrays by name) and its Conv nodes in graph order."""
    onnx = import_onnx()

    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, ValueError, RuntimeError, OSError) as exc:
        raise AssetError(f"this is not a readable ONNX file ({type(exc).__name__}: {exc})", path=path,
                         fix=fix) from exc
    if not model.graph.node:
        # An empty file parses as an empty model; so may a few stray bytes.
        raise AssetError("the ONNX file holds no graph: it is empty or not a model", path=path, fix=fix)
    tensors: dict[str, np.ndarray] = {}
    for initializer in model.graph.initializer:
        if initializer.data_location == onnx.TensorProto.EXTERNAL:
            raise AssetError(f"the ONNX file keeps tensor {initializer.name!r} in another file; bgbias reads "
                             "only self-contained model files", path=path, fix=fix)
        if initializer.data_type != onnx.TensorProto.FLOAT:
            raise AssetError(f"tensor {initializer.name!r} of the ONNX file is not float32 "
                             f"({onnx.TensorProto.DataType.Name(initializer.data_type)}): not a U²-Net file "
                             "as rembg ships it", path=path, fix=fix)
        try:
            tensors[initializer.name] = numpy_helper.to_array(initializer)
        except ValueError as exc:  # its data is not as long as its shape says
            raise AssetError(f"tensor {initializer.name!r} of the ONNX file is damaged: its data does not "
                             f"fill its shape {list(initializer.dims)} ({exc})", path=path, fix=fix) from exc
    _check_other_nodes(model.graph.node, path=path, fix=fix)
    convs = [_file_conv(node, path=path, fix=fix) for node in model.graph.node if node.op_type == "Conv"]
    return tensors, convs


GRAPH_OPS = {"Conv", "Relu", "MaxPool", "Resize", "Concat", "Add", "Sigmoid", "Constant", "Shape", "Gather",
             "Unsqueeze", "Slice", "Cast"}
"""Every operation rembg's U²-Net graphs use (with those computing each resize's target size)."""

NODE_ATTRIBUTES = {
    "MaxPool": {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
    "Resize": {"mode": b"linear", "coordinate_transformation_mode": b"pytorch_half_pixel"},
}
"""The module's pooling and resizing: a graph that pools or resizes otherwise computes another function."""


def _check_other_nodes(nodes, *, path: Path, fix: str) -> None:
    """Refuse a graph with an operation the network does not have, or that pools or resizes otherwise."""
    for node in nodes:
        if node.op_type not in GRAPH_OPS:
            raise AssetError(f"the ONNX graph has a {node.op_type} operation ({node.name!r}), which U²-Net "
                             "does not: it is another network", path=path, fix=fix)
        wanted = NODE_ATTRIBUTES.get(node.op_type)
        if wanted is None:
            continue
        found = {attribute.name: helper.get_attribute_value(attribute) for attribute in node.attribute}
        for name, value in wanted.items():
            if found.get(name) != value:
                raise AssetError(f"{node.op_type} node {node.name!r} has {name} {found.get(name)!r}, where "
                                 f"U²-Net's has {value!r}", path=path, fix=fix)


def _file_conv(node, *, path: Path, fix: str) -> FileConv:
    for attribute in node.attribute:
        wanted = CONV_ATTRIBUTE_TYPES.get(attribute.name)
        found = AttributeProto.AttributeType.Name(attribute.type)
        if wanted is not None and found != wanted:
            raise AssetError(f"attribute {attribute.name!r} of Conv node {node.name!r} is of type {found}, "
                             f"where ONNX defines {wanted}", path=path, fix=fix)
    attributes = {attribute.name: helper.get_attribute_value(attribute) for attribute in node.attribute}
    kernel = tuple(attributes.get("kernel_shape", ()))
    pads = tuple(attributes.get("pads", (0,) * 2 * len(kernel)))
    half = len(pads) // 2
    # ONNX pads are (begin..., end...); symmetric ones are the module's padding, others cannot match.
    padding = pads[:half] if pads[:half] == pads[half:] else pads
    return FileConv(
        weight=node.input[1] if len(node.input) > 1 else "",
        bias=node.input[2] if len(node.input) > 2 and node.input[2] else None,
        kernel=kernel,
        dilation=tuple(attributes.get("dilations", (1,) * len(kernel))),
        padding=padding,
        stride=tuple(attributes.get("strides", (1,) * len(kernel))),
        groups=int(attributes.get("group", 1)),
    )


def map_weights(model: U2Net, tensors: dict[str, np.ndarray], convs: list[FileConv], *, path: Path,
                fix: str) -> dict[str, torch.Tensor]:
    """The module's state dict filled from the file: every file convolution matched to one of the module's
    (by name, else in the order both run them), checked, and every initializer used exactly once."""
    ours = dict(convs_in_order(model))
    named_file = [conv for conv in convs if conv.weight.rsplit(".", 1)[0] in NAMED]
    named = {conv.weight.rsplit(".", 1)[0]: conv for conv in named_file}
    unnamed_ours = [name for name in ours if name not in NAMED.values()]
    unnamed_file = [conv for conv in convs if conv.weight.rsplit(".", 1)[0] not in NAMED]
    # Counted as a list, not a dict: a named convolution given twice is another graph, not the same one.
    if len(unnamed_file) != len(unnamed_ours) or len(named_file) != len(NAMED) or len(named) != len(NAMED):
        raise AssetError(
            f"the ONNX file holds {len(convs)} convolutions ({len(named_file)} of them named side/outconv); "
            f"this U²-Net has {len(ours)} ({len(NAMED)} named): it is another network", path=path, fix=fix)
    pairs = [(NAMED[name], conv) for name, conv in named.items()] + list(zip(unnamed_ours, unnamed_file,
                                                                              strict=True))
    state: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    for name, file_conv in pairs:
        conv = ours[name]
        _check_conv(name, conv, file_conv, path=path, fix=fix)
        for kind, initializer in (("weight", file_conv.weight), ("bias", file_conv.bias)):
            parameter = getattr(conv, kind)
            if initializer is None or initializer not in tensors:
                raise AssetError(f"the file's convolution for {name} has no {kind} initializer", path=path,
                                 fix=fix)
            value = tensors[initializer]
            if tuple(value.shape) != tuple(parameter.shape):
                raise AssetError(f"initializer {initializer!r} has shape {list(value.shape)}, but "
                                 f"{name}.{kind} needs {list(parameter.shape)}", path=path, fix=fix)
            if initializer in used:
                raise AssetError(f"initializer {initializer!r} feeds two convolutions", path=path, fix=fix)
            used.add(initializer)
            state[f"{name}.{kind}"] = torch.tensor(value)
    left_over = sorted(set(tensors) - used)
    if left_over:
        shown = ", ".join(repr(name) for name in left_over[:5]) + (" …" if len(left_over) > 5 else "")
        raise AssetError(f"{len(left_over)} initializers of the ONNX file fit no parameter of U²-Net "
                         f"({shown})", path=path, fix=fix)
    missing = sorted(set(model.state_dict()) - set(state))
    if missing:
        raise AssetError(f"the ONNX file leaves {len(missing)} parameters unset ({', '.join(missing[:5])})",
                         path=path, fix=fix)
    return state


def _check_conv(name: str, conv: nn.Conv2d, file_conv: FileConv, *, path: Path, fix: str) -> None:
    wanted = {"kernel": tuple(conv.kernel_size), "dilation": tuple(conv.dilation),
              "padding": tuple(conv.padding), "stride": tuple(conv.stride), "groups": conv.groups}
    found = {key: getattr(file_conv, key) for key in wanted}
    differ = [f"{key} {found[key]} (needs {wanted[key]})" for key in wanted if found[key] != wanted[key]]
    if differ:
        raise AssetError(f"the file's convolution for {name} differs: {', '.join(differ)}", path=path,
                         fix=fix)


def convs_in_order(model: U2Net) -> Iterator[tuple[str, nn.Conv2d]]:
    """Every convolution of ``model`` by state-dict name, in the order its forward pass runs them."""
    for stage, block in enumerate(model.encoder):
        yield from _block_convs(f"encoder.{stage}", block)
    for stage, block in enumerate(model.decoder):
        yield from _block_convs(f"decoder.{stage}", block)
    for index, side in enumerate(model.side):
        yield f"side.{index}", side
    yield "fuse", model.fuse


def _block_convs(prefix: str, block: ResidualUBlock) -> Iterator[tuple[str, nn.Conv2d]]:
    yield f"{prefix}.input.conv", block.input.conv
    for level, layer in enumerate(block.encoder):
        yield f"{prefix}.encoder.{level}.conv", layer.conv
    for level in range(len(block.decoder) - 1, -1, -1):
        yield f"{prefix}.decoder.{level}.conv", block.decoder[level].conv
