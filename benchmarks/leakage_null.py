"""What the leakage meter's background-only view retrieves on the dial's bench at ρ = 0, against a
label-permutation null, and what removing the object alone could explain (docs/leakage.md, "At ρ = 0").

At ρ = 0 every background is drawn apart from the class, so the background-only view should retrieve the
class no better than labels dealt at random. For each fill and hole, this script embeds the view with the
meter's default encoder, ranks the split against itself once, and scores that ranking with the true labels
and with ``--permutations`` random permutations of them (the null: what a view with no class in it reads,
neighbour structure and all), giving the one-sided p of the true reading. Holes: the meter's (the mask
dilated by ``--dilations`` of the crop's side), or the object's bounding box or the square around it,
dilated alike. With ``--control-seeds N`` it also embeds the **hole control** N times: each image's hole cut
into the background of an image of another class (drawn as the mixed-rand variant draws donors, with each
seed; the donor's own object removed too), which keeps what the hole's size, shape and place give away and
nothing of the image's own background.

    python benchmarks/leakage_null.py      # in the folder benchmarks/leakage_dial.py ran in
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from leakage_dial import prepared_bench

from bgbias.api import as_embedding_model
from bgbias.corrupted.render import load_pair
from bgbias.data.splits import split_items
from bgbias.data.tensors import chw_tensor
from bgbias.data.transforms import eval_transform_pair
from bgbias.engine.embedding import embed_images
from bgbias.leakage_meter.meter import DEFAULT_ENCODER
from bgbias.measurement.request import measured_geometry
from bgbias.retrieval.metrics import chance_scores, retrieval_scores
from bgbias.retrieval.retrievers import ExactL2
from bgbias.variants.variant_manifests import sample_entries
from bgbias.variants.variants import FILLS, dilated_mask, object_box, without_object

HOLES = ("mask", "box", "square")


def hole_of(mask: np.ndarray, hole: str, dilation: float) -> np.ndarray:
    """The hard mask removed: the object's mask, its bounding box or the square around that box, each
    dilated by ``dilation`` of the side."""
    removed = dilated_mask(mask, max(1, round(dilation * mask.shape[0])))
    box = object_box(removed)
    if hole == "mask" or box is None:
        return removed
    top, left, bottom, right = box
    if hole == "square":
        side = min(max(bottom - top, right - left), mask.shape[0])
        top = min(max(0, (top + bottom - side) // 2), mask.shape[0] - side)
        left = min(max(0, (left + right - side) // 2), mask.shape[1] - side)
        bottom, right = top + side, left + side
    out = np.zeros_like(removed)
    out[top:bottom, left:right] = 255
    return out


class BackgroundView:
    """Background-only images with a chosen hole; with ``donors``, the hole control (the image's hole and
    the donor's own in the donor's image)."""

    def __init__(self, items: list[Any], masks: Path, dataset: str, geometry: Any, fill: str, hole: str,
                 dilation: float, donors: np.ndarray | None = None) -> None:
        self.items, self.masks, self.dataset, self.geometry = items, masks, dataset, geometry
        self.fill, self.hole, self.dilation, self.donors = fill, hole, dilation, donors

    def __len__(self) -> int:
        return len(self.items)

    def _pair(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return eval_transform_pair(*load_pair(self.items[i], self.masks, self.dataset), self.geometry)

    def __getitem__(self, i: int) -> dict[str, Any]:
        image, mask = self._pair(i)
        removed = hole_of(mask, self.hole, self.dilation)
        if self.donors is not None:
            image, donor_mask = self._pair(int(self.donors[i]))
            removed = np.maximum(removed, hole_of(donor_mask, self.hole, self.dilation))
        pixels = without_object(image, removed, self.fill)
        return {"image": chw_tensor(pixels), "label": int(self.items[i].label), "index": i}


def null_test(embeddings: np.ndarray, labels: np.ndarray, permutations: int, seed: int) -> dict[str, float]:
    """MAP@R of one ranking under the true labels and under ``permutations`` random dealings of them."""
    sizes = np.unique(labels, return_counts=True)[1]
    knn = ExactL2().neighbours(embeddings, int(sizes.max()) - 1)

    def score(dealt: np.ndarray) -> float:
        _, where, counts = np.unique(dealt, return_inverse=True, return_counts=True)
        return retrieval_scores(dealt[knn], dealt, counts[where] - 1).map_at_r

    rng = np.random.default_rng(seed)
    null = np.array([score(labels[rng.permutation(len(labels))]) for _ in range(permutations)])
    observed = score(labels)
    low, high = np.percentile(null, [2.5, 97.5])
    p_value = (1 + (null >= observed).sum()) / (1 + permutations)
    return {"observed": observed, "null_mean": float(null.mean()), "null_low": float(low),
            "null_high": float(high), "p": float(p_value)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rho", type=float, default=0.0)
    parser.add_argument("--bench-seed", type=int, default=0, help="the bench's build seed (the dial's is 0)")
    parser.add_argument("--fills", nargs="+", choices=FILLS, default=list(FILLS))
    parser.add_argument("--holes", nargs="+", choices=HOLES, default=["mask"])
    parser.add_argument("--dilations", type=float, nargs="+", default=[0.02])
    parser.add_argument("--permutations", type=int, default=1000)
    parser.add_argument("--control-seeds", type=int, default=0)
    args = parser.parse_args()

    encoder = as_embedding_model(DEFAULT_ENCODER, device="cpu")
    dataset, masks, _ = prepared_bench(args.rho, "ground-truth", "test", "cpu", seed=args.bench_seed)
    items = split_items(dataset, "test")
    labels = np.array([item.label for item in items], np.int64)
    geometry = measured_geometry(encoder, dataset.name)

    def embed(view: BackgroundView) -> np.ndarray:
        state, _ = embed_images(encoder, view, encoder.device, batch_size=64, workers=0, amp=encoder.amp,
                                progress=False, desc="view")
        return state["embedding"]

    chance = chance_scores(labels)["map_at_r"]
    print(f"ρ {args.rho:g}, bench seed {args.bench_seed}, {len(items)} images; "
          f"chance MAP@R {100 * chance:.3f} %")
    print("| fill | hole | dilation | MAP@R (%) | null mean | null 95 % | p | hole control (%), per seed |")
    print("|---|---|---:|---:|---:|---|---:|---|")
    for fill in args.fills:
        for hole in args.holes:
            for dilation in args.dilations:
                view = BackgroundView(items, masks, dataset.name, geometry, fill, hole, dilation)
                test = null_test(embed(view), labels, args.permutations, seed=0)
                controls = []
                for seed in range(args.control_seeds):
                    index = {item.id: i for i, item in enumerate(items)}
                    donors = np.array([index[e.donor] for e in sample_entries(items, "mixed-rand", seed, 0)])
                    control = BackgroundView(items, masks, dataset.name, geometry, fill, hole, dilation,
                                             donors)
                    controls.append(null_test(embed(control), labels, 1, seed=0)["observed"])
                control_cell = ", ".join(f"{100 * value:.3f}" for value in controls) or "–"
                null = f"{100 * test['null_low']:.3f}–{100 * test['null_high']:.3f}"
                print(f"| {fill} | {hole} | {dilation:g} | {100 * test['observed']:.3f} | "
                      f"{100 * test['null_mean']:.3f} | {null} | "
                      f"{test['p']:.3f} | {control_cell} |", flush=True)


if __name__ == "__main__":
    main()
