"""How much each hardware lever changes a trained model's embeddings and scores: the same weights embedded
under every lever, compared with float32/contiguous.

    python benchmarks/levers_bits.py RUN [RUN ...] [--split test]

For each run (a folder ``bgbias train`` or ``bgbias study`` wrote), its best checkpoint is loaded once per
lever (memory format contiguous or channels_last, autocast off or bf16 where the device has it) and the split
it was trained for is embedded clean. The table gives, per lever, the largest absolute difference of an
embedding coordinate from float32/contiguous's, the smallest cosine between an image's two embeddings, the
share of queries whose nearest neighbour changed, and MAP@R (exact search, the run's own retrieval).
Training under a lever changes more than this (every step rounds differently and the paths part); the parity
runs in docs/benchmarks.md measure that.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.levers_speed import LEVERS
from bgbias.data.eval_images import EvalImages
from bgbias.engine.device import cpu_has_native_bf16, memory_format, resolve_amp
from bgbias.engine.embedding import embed_images
from bgbias.engine.trained import load_trained
from bgbias.measurement.request import MeasureRequest, measured_geometry, requested_split
from bgbias.retrieval.metrics import score_embeddings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--split", default="test", choices=("test", "val"))
    args = parser.parse_args()

    import torch

    print(f"command: python {shlex.join(sys.argv)}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"native bf16 {cpu_has_native_bf16()}\n")
    print("| run | lever | max abs Δ | min cosine | top-1 changed | MAP@R |")
    print("|---|---|---:|---:|---:|---:|")
    for run in args.runs:
        model = load_trained(run, device="cpu")
        dataset, items = requested_split(model, MeasureRequest(split=args.split))
        images = EvalImages(items, measured_geometry(model, dataset.name))
        reference = None
        for label, amp, layout in LEVERS:
            if amp == "bf16" and not cpu_has_native_bf16():
                continue
            model.method.set_memory_format(memory_format(layout))
            state, labels = embed_images(model, images, model.device, amp=resolve_amp(amp, model.device))
            embedding = state["embedding"] if "embedding" in state else next(iter(state.values()))
            scores = score_embeddings(state, labels, retrieval=model.retrieval())
            top1 = _nearest(embedding)
            if reference is None:
                reference = (embedding, top1)
            rows, reference_rows = (array.reshape(len(array), -1) for array in (embedding, reference[0]))
            cosine = np.sum(rows * reference_rows, 1) / (
                np.linalg.norm(rows, axis=1) * np.linalg.norm(reference_rows, axis=1))
            largest = np.abs(embedding - reference[0]).max()
            print(f"| {run.name} | {label} | {largest:.2e} | {cosine.min():.6f} | "
                  f"{np.mean(top1 != reference[1]):.2%} | {100 * scores.map_at_r:.2f} |", flush=True)


def _nearest(embedding: np.ndarray) -> np.ndarray:
    """Each row's nearest other row by L2 distance (ties: the first)."""
    flat = embedding.reshape(len(embedding), -1).astype(np.float64)
    squared = (flat**2).sum(1)
    distances = squared[:, None] + squared[None, :] - 2 * flat @ flat.T
    np.fill_diagonal(distances, np.inf)
    return distances.argmin(1)


if __name__ == "__main__":
    main()
