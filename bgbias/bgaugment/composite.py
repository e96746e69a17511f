"""The one compositing function, which BGAugment and the fixed corrupted sets both call so they never drift.

It is the paper's code's ``x·m + b·(1−m)`` (paper eq. 1 with its typo fixed), with the soft mask used as is
(the paper's code never thresholds it). The blend is affine with weights summing to one, so it gives the same
result on raw pixels as on per-channel normalised tensors.
"""

from __future__ import annotations

import numpy as np
import torch


def composite(images: torch.Tensor, masks: torch.Tensor, backgrounds: torch.Tensor) -> torch.Tensor:
    """``masks·images + (1 − masks)·backgrounds``: (B, C, H, W) images and backgrounds, (B, 1, H, W) masks in
    [0, 1] (1 = foreground), one float dtype and device. Mask values are not checked: that would force a
    device synchronisation on every training step."""
    tensors = {"images": images, "masks": masks, "backgrounds": backgrounds}
    for name, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"composite: {name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dim() != 4:
            raise ValueError(f"composite: {name} must be 4-D (B, C, H, W), got shape {tuple(tensor.shape)}")
        if not tensor.is_floating_point():
            raise TypeError(f"composite: {name} must be floating point, got {tensor.dtype}")
        if tensor.dtype != images.dtype or tensor.device != images.device:
            raise TypeError(
                f"composite: {name} is {tensor.dtype} on {tensor.device}, images are {images.dtype} on "
                f"{images.device}; convert them to one dtype and device first"
            )
    if backgrounds.shape != images.shape:
        raise ValueError(
            f"composite: backgrounds {tuple(backgrounds.shape)} must have the shape of images "
            f"{tuple(images.shape)}"
        )
    batch, _, height, width = images.shape
    if masks.shape != (batch, 1, height, width):
        raise ValueError(
            f"composite: masks must be {(batch, 1, height, width)} for images {tuple(images.shape)}, "
            f"got {tuple(masks.shape)}"
        )
    return masks * images + (1 - masks) * backgrounds


def composite_pixels(image: np.ndarray, mask: np.ndarray, background: np.ndarray) -> np.ndarray:
    """:func:`composite` of one picture in ``uint8``: ``image`` and ``background`` (H, W, 3), ``mask`` (H, W)
    with 255 = foreground; the blend rounded back to ``uint8``. What the corrupted sets and the profile's
    variants are rendered with."""
    x = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)[None].float()
    b = torch.from_numpy(np.ascontiguousarray(background)).permute(2, 0, 1)[None].float()
    m = torch.from_numpy(np.ascontiguousarray(mask))[None, None].float() / 255.0
    return composite(x, m, b)[0].permute(1, 2, 0).round().clamp(0, 255).to(torch.uint8).numpy()
