"""U²-Net masks by bgbias's own PyTorch network, in batches, on the CPU or CUDA, with rembg's transforms
(:mod:`bgbias.saliency.u2net`): workers only shrink each image to 320²; the scaling, normalisation, network
and min-max stretch to 8 bits run on the device, so only 320² bytes per image come back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image

from bgbias.saliency.packed_convolutions import can_pack, pack_convolutions
from bgbias.saliency.u2net import IMAGENET_MEAN, IMAGENET_STD, INPUT_SIZE, SoftMask
from bgbias.saliency.u2net_network import U2Net

_AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}
"""What the network autocasts to for a precision other than ``fp32``; everything around it stays float32."""


@dataclass(frozen=True)
class Stretched:
    """One image's network output as the mask is made from it: 8-bit at 320², and the raw range."""

    pixels: np.ndarray
    low: float
    high: float


class TorchU2netSession:
    """A u2net-family model in bgbias's own network on ``device``; its ``info`` says how it runs."""

    def __init__(self, network: U2Net, device: torch.device, precision: str, info):
        self.info = info
        self._device = device
        self._precision = precision
        self._network = network.to(device, memory_format=torch.channels_last).eval()
        if device.type == "cpu" and precision == "fp32" and can_pack():
            with self.running():  # packed for the threads each call will have
                self._network = pack_convolutions(self._network, info.batch)
        self._mean = torch.tensor(IMAGENET_MEAN, dtype=torch.float32, device=device).view(1, 3, 1, 1)
        self._std = torch.tensor(IMAGENET_STD, dtype=torch.float32, device=device).view(1, 3, 1, 1)
        # On CUDA every batch runs on this one thread, for the session's life: PyTorch keeps cuDNN's chosen
        # convolution plans per thread (pytorch/pytorch#191744), so a network thread of its own per run would
        # choose them all again, and on an H100 that search took seconds per run (docs/benchmarks.md).
        self._cuda_thread = ThreadPoolExecutor(1, "u2net-cuda") if device.type == "cuda" else None

    def prepare(self, image: Image.Image) -> np.ndarray:
        """The image at 320² as 8-bit RGB pixels (height, width, 3): rembg's LANCZOS shrink."""
        return np.asarray(image.convert("RGB").resize(INPUT_SIZE, Image.Resampling.LANCZOS))

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """For the run, then back: on the CPU ``info.threads`` threads per call; on CUDA cuDNN's benchmark
        mode (every batch has one shape) and no TF32, which moved masks by up to 12 gray levels from the
        CPU's on an H100 (docs/benchmarks.md)."""
        if self._device.type == "cuda":
            previous = torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32
            torch.backends.cudnn.benchmark = True
            torch.backends.cudnn.allow_tf32 = False
            try:
                yield
            finally:
                torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32 = previous
            return
        previous_threads = torch.get_num_threads()
        torch.set_num_threads(self.info.threads)
        try:
            yield
        finally:
            torch.set_num_threads(previous_threads)

    def infer(self, batch: Sequence[np.ndarray]) -> list[Stretched]:
        """One network call for the whole batch. A short last batch is padded with copies of its last image
        (outputs dropped), so the network sees one shape only: cuDNN searches for its fastest convolutions
        once, and the CPU's weights stay packed for that shape
        (:mod:`~bgbias.saliency.packed_convolutions`)."""
        padded = [*batch, *[batch[-1]] * (self.info.batch - len(batch))]
        if self._cuda_thread is None:
            return self._infer(padded)[:len(batch)]
        return self._cuda_thread.submit(self._infer, padded).result()[:len(batch)]

    def _infer(self, batch: Sequence[np.ndarray]) -> list[Stretched]:
        pixels = torch.from_numpy(np.stack(batch))
        if self._device.type == "cuda":
            pixels = pixels.pin_memory().to(self._device, non_blocking=True)
        with torch.inference_mode():
            # (N, H, W, 3) seen as (N, 3, H, W): channels-last memory without a copy.
            x = pixels.permute(0, 3, 1, 2).float()
            peak = x.amax(dim=(1, 2, 3), keepdim=True).clamp_min(1e-6)
            x = ((x / peak) - self._mean) / self._std
            with torch.autocast(self._device.type, _AUTOCAST.get(self._precision), self._precision != "fp32"):
                output = self._network(x)
            output = output.float()[:, 0]
            low = output.amin(dim=(1, 2), keepdim=True)
            high = output.amax(dim=(1, 2), keepdim=True)
            spread = high - low
            stretched = torch.where(spread > 0, (output - low) / torch.where(spread > 0, spread, 1.0), 0.0)
            # Truncated, as numpy's astype(uint8) does with rembg's float32 mask.
            masks = (stretched * 255).to(torch.uint8).cpu().numpy()
            lows, highs = low.flatten().cpu().tolist(), high.flatten().cpu().tolist()
        return [Stretched(mask, lo, hi) for mask, lo, hi in zip(masks, lows, highs, strict=True)]

    def finish(self, raw: Stretched, size: tuple[int, int]) -> SoftMask:
        small = Image.fromarray(raw.pixels)
        return SoftMask(small.resize(size, Image.Resampling.LANCZOS), raw.low, raw.high)
