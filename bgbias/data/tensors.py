"""Decoded images handed to torch: the one place the loaders' datasets turn arrays into tensors."""

from __future__ import annotations

import numpy as np
import torch


def chw_tensor(array: np.ndarray) -> torch.Tensor:
    """A ``uint8`` H×W×C or H×W array as a contiguous C×H×W tensor (H×W becomes 1×H×W)."""
    if array.ndim == 2:
        array = array[:, :, None]
    # A copy: arrays viewed from PIL images are read-only, which torch warns about and must not write to.
    return torch.from_numpy(np.array(array.transpose(2, 0, 1), order="C"))
