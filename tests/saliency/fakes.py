"""A fast stand-in for a saliency session: same stages and contract as the real ones, no network."""

from __future__ import annotations

import contextlib
import shutil
import threading
from pathlib import Path

import numpy as np
from PIL import Image

from bgbias.saliency.sessions import CPU, ModelInfo
from bgbias.saliency.u2net import SoftMask, u2net_mask


def fake_info(name: str = "fake", md5: str = "0" * 32, streams: int = 2, batch: int = 1,
              backend: str = "onnxruntime") -> ModelInfo:
    return ModelInfo(
        name=name,
        file=Path(f"{name}.onnx"),
        bytes=0,
        md5=md5,
        sha256="0" * 64,
        backend=backend,
        provider=CPU,
        precision="fp32",
        batch=batch,
        streams=streams,
        threads=1,
        versions=(("rembg", "test"), ("onnxruntime", "test")),
    )


def made_masks(source: Path, out: Path, model: str = "u2netp", backend: str = "torch") -> Path:
    """A copy of the masks folder ``source`` at ``out`` with the manifest ``bgbias masks --model MODEL
    --backend BACKEND`` would have left there: what the reports that use masks record as their maker."""
    from bgbias.saliency.records import build_manifest, write_manifest

    shutil.copytree(source, out)
    write_manifest(out, build_manifest([], {}, fake_info(model, backend=backend), 0.5, []))
    return out


class FakeSession:
    """Brightness on an 8×8 grid as the "saliency", stretched like U²-Net's output; counts its runs."""

    def __init__(self, info: ModelInfo | None = None):
        self.info = info or fake_info()
        self.calls = 0
        self.batches: list[int] = []
        self._lock = threading.Lock()

    def prepare(self, image: Image.Image) -> np.ndarray:
        return np.asarray(image.convert("L").resize((8, 8), Image.Resampling.BILINEAR), dtype=np.float32)

    def running(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def infer(self, batch: list[np.ndarray]) -> list[np.ndarray]:
        assert 1 <= len(batch) <= self.info.batch
        with self._lock:
            self.calls += len(batch)
            self.batches.append(len(batch))
        return [(prepared / 255.0)[None, None] for prepared in batch]

    def finish(self, raw: np.ndarray, size: tuple[int, int]) -> SoftMask:
        return u2net_mask(raw, size)
