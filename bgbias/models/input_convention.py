"""How an RGB image in [0, 1] becomes a network's input: channel order, value range, mean and std. Kept as
data beside each backbone, so every data pipeline hands over plain RGB in [0, 1] whatever network comes next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor


@dataclass(frozen=True)
class InputConvention:
    """``x' = (scale · x − mean) / std`` per channel, after an optional RGB→BGR swap.

    ``mean`` and ``std`` are given in the network's channel order, i.e. in BGR order when ``bgr`` is set.
    """

    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    bgr: bool = False
    scale: float = 1.0

    def apply(self, images: Tensor) -> Tensor:
        """(B, 3, H, W) float RGB in [0, 1] -> the network's input, same dtype and device."""
        _check_batch(images, "float images in [0, 1]")
        if self.bgr:
            images = images.flip(1)
        mean = images.new_tensor(self.mean).view(1, 3, 1, 1)
        std = images.new_tensor(self.std).view(1, 3, 1, 1)
        return (images * self.scale - mean) / std

    def invert(self, inputs: Tensor) -> Tensor:
        """The network's input → float RGB in [0, 1]: the differentiable inverse of :meth:`apply`."""
        _check_batch(inputs, "float network inputs")
        mean = inputs.new_tensor(self.mean).view(1, 3, 1, 1)
        std = inputs.new_tensor(self.std).view(1, 3, 1, 1)
        images = (inputs * std + mean) / self.scale
        return images.flip(1) if self.bgr else images


def _check_batch(images: Tensor, what: str) -> None:
    if images.ndim != 4 or images.shape[1] != 3:
        raise ValueError(f"expected images of shape (B, 3, H, W), got {tuple(images.shape)}")
    if not images.is_floating_point():
        raise TypeError(f"expected {what}, got dtype {images.dtype}")


IMAGENET = InputConvention(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
"""torchvision's ImageNet models (ResNet-50, MobileNetV2)."""

CAFFE_BGR = InputConvention(mean=(104.0, 117.0, 128.0), std=(1.0, 1.0, 1.0), bgr=True, scale=255.0)
"""Caffe-trained BN-Inception as ported by pretrainedmodels (the paper's backbone): BGR, 0–255, mean only."""

SYMMETRIC = InputConvention(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
"""[0, 1] -> [−1, 1]: what torchvision's GoogLeNet weights (ported from TensorFlow) expect; torchvision gets
there with ``transform_input=True`` applied to ImageNet-normalised input."""

EFFICIENTNET_LITE = InputConvention(mean=(127.0, 127.0, 127.0), std=(128.0, 128.0, 128.0), scale=255.0)
"""TensorFlow's EfficientNet-Lite (``efficientnet_lite_builder``: mean 127, std 128 on 0–255 pixels), i.e.
mean ≈ 0.498 and std ≈ 0.502 on RGB in [0, 1]."""

CLIP = InputConvention(mean=(0.48145466, 0.4578275, 0.40821073), std=(0.26862954, 0.26130258, 0.27577711))
"""OpenAI CLIP's image encoders (and open_clip's CLIP-trained ones)."""

UNIT = InputConvention(mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))
"""RGB in [0, 1] as it is: a network that normalises its input itself."""
