"""U²-Net's convolutions on the CPU with their weights laid out once, for the input shape they will see.

PyTorch's CPU convolution hands oneDNN a plain weight tensor, and oneDNN rearranges it into its blocked layout
on every call: for ``u2net`` that is 176 MB read and written again per image, and each ReLU is one more pass
over its convolution's output. Packed here, each weight is rearranged once, when the session opens, and the
ReLU is applied as the convolution writes its output (docs/benchmarks.md, *Mask backends*). oneDNN chooses
the layout from the whole input shape, batch included, and from the threads a call has, and rearranges a
weight packed otherwise on every call, slower than not packing at all: so each convolution is
packed for the shape it sees at 320² and the session's batch size, under the session's threads per call, and
the session gives it only that shape (:class:`~bgbias.saliency.torch_session.TorchU2netSession` pads a short
batch).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from torch import nn

from bgbias.saliency.u2net import INPUT_SIZE
from bgbias.saliency.u2net_network import ConvRelu, U2Net, U2NetShape


def can_pack() -> bool:
    """Whether this torch computes CPU convolutions with oneDNN and offers its packed-weight operations."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_convolution_pointwise")


class PackedConvRelu(nn.Module):
    """A :class:`~bgbias.saliency.u2net_network.ConvRelu` whose weight oneDNN laid out once for inputs of
    ``input_shape``, the ReLU computed as the convolution writes its output; float32, CPU, inference only."""

    def __init__(self, layer: ConvRelu, input_shape: Sequence[int]):
        super().__init__()
        conv = layer.conv
        self.input_shape = tuple(input_shape)
        self._geometry = (list(conv.padding), list(conv.stride), list(conv.dilation), conv.groups)
        with torch.no_grad():
            self._weight = torch.ops.mkldnn._reorder_convolution_weight(
                conv.weight.detach().float(), *self._geometry, list(input_shape))
            self._bias = conv.bias.detach().float().clone()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._convolution_pointwise(
            x, self._weight, self._bias, *self._geometry, "relu", [], "")


@functools.cache
def conv_relu_input_shapes(shape: U2NetShape, batch: int) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(module name, input shape) of each ConvRelu layer of a U²-Net of ``shape``, for a batch of ``batch``
    images at 320²: traced on a weightless network (the meta device), so nothing is computed."""
    with torch.device("meta"):
        shadow = U2Net(shape)
    shapes: dict[str, tuple[int, ...]] = {}
    hooks = [module.register_forward_hook(
                 lambda _module, inputs, _output, name=name: shapes.__setitem__(name, tuple(inputs[0].shape)))
             for name, module in shadow.named_modules() if isinstance(module, ConvRelu)]
    try:
        shadow(torch.empty(batch, 3, *INPUT_SIZE[::-1], device="meta"))
    finally:
        for hook in hooks:
            hook.remove()
    return tuple(shapes.items())


def pack_convolutions(network: U2Net, batch: int) -> U2Net:
    """``network`` (float32, on the CPU, in eval mode) with every ConvRelu replaced in place by a
    :class:`PackedConvRelu` for batches of ``batch`` images at 320², run with as many torch threads as now;
    the side and fusion layers stay as they are (one output channel each: little to gain)."""
    for name, shape in conv_relu_input_shapes(network.shape, batch):
        parent, _, child = name.rpartition(".")
        owner = network.get_submodule(parent)
        setattr(owner, child, PackedConvRelu(owner.get_submodule(child), shape))
    return network
