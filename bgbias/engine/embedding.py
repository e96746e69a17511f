"""Embed a dataset of uint8 images with a model, batch by batch, in eval mode and without gradients."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from tqdm import tqdm

from bgbias.data.loader import ImageLoader
from bgbias.engine.device import loader_workers
from bgbias.models.precision import network_precision
from bgbias.retrieval.state import named_arrays

if TYPE_CHECKING:
    from bgbias.methods.embedding_model import EmbeddingModel


def embed_images(
    model: EmbeddingModel,
    images: torch.utils.data.Dataset,
    device: torch.device,
    *,
    batch_size: int = 64,
    workers: int | None = None,
    amp: torch.dtype | None = None,
    progress: bool = False,
    desc: str = "embed",
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """``(per-image state, labels int64 (N,))`` in the dataset's order; the state maps array names to float32
    ``(N, …)`` (``{"embedding": (N, D)}`` for one tensor). ``images`` yields dicts with a uint8 ``image``
    and a ``label``; ``model`` is put in eval mode and left there."""
    # Its own generator: a DataLoader otherwise draws its worker seed from torch's global RNG, which would
    # make validation shift the random state that training and an exact resume depend on.
    loader = ImageLoader(
        images, batch_size=batch_size, shuffle=False, num_workers=loader_workers(workers, device),
        pin_memory=device.type == "cuda", generator=torch.Generator().manual_seed(0),
    )
    model.eval()
    parts: dict[str, list[torch.Tensor]] = {}
    labels = []
    with torch.inference_mode():
        for batch in tqdm(loader, desc=desc, unit="batch", leave=False, disable=not progress):
            pixels = batch["image"].to(device, non_blocking=True).float().div_(255)
            with network_precision(amp):
                out = named_arrays(model.embed(pixels))
            for name, array in out.items():
                parts.setdefault(name, []).append(array.float().cpu())
            labels.append(batch["label"])
    if not labels:
        return {}, np.zeros(0, np.int64)
    state = {name: torch.cat(arrays).numpy() for name, arrays in parts.items()}
    return state, torch.cat(labels).numpy().astype(np.int64)
