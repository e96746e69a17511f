"""Embed a dataset of uint8 images with a method, batch by batch, in eval mode and without gradients."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from bgbias.engine.device import autocast

if TYPE_CHECKING:
    import torch

    from bgbias.methods.base import Method


def embed_images(
    method: Method,
    images: torch.utils.data.Dataset,
    device: torch.device,
    *,
    batch_size: int = 64,
    workers: int = 0,
    amp: torch.dtype | None = None,
    progress: bool = False,
    desc: str = "embed",
) -> tuple[np.ndarray, np.ndarray]:
    """``(embeddings float32 (N, D), labels int64 (N,))`` in the dataset's order.

    ``images`` yields dicts with a uint8 ``image`` (3, H, W) and a ``label`` (EvalImages, CorruptedImages).
    The method is put in eval mode and left there.
    """
    import torch
    from tqdm import tqdm

    from bgbias.data.loader import ImageLoader

    # Its own generator: a DataLoader otherwise draws its worker seed from torch's global RNG, which would
    # make validation shift the random state that training and an exact resume depend on.
    loader = ImageLoader(
        images, batch_size=batch_size, shuffle=False, num_workers=workers,
        pin_memory=device.type == "cuda", generator=torch.Generator().manual_seed(0),
    )
    method.eval()
    embeddings, labels = [], []
    with torch.inference_mode():
        for batch in tqdm(loader, desc=desc, unit="batch", leave=False, disable=not progress):
            pixels = batch["image"].to(device, non_blocking=True).float().div_(255)
            with autocast(device, amp):
                out = method.embed(pixels)
            embeddings.append(out.float().cpu())
            labels.append(batch["label"])
    if not embeddings:
        return np.zeros((0, 0), np.float32), np.zeros(0, np.int64)
    return torch.cat(embeddings).numpy(), torch.cat(labels).numpy().astype(np.int64)
