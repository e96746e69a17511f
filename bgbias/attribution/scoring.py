"""One image of an explanation: the mask it is scored against, its eval crop, the noise it owns, and the
foreground score of its attribution map."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from bgbias.attribution.foreground_score import (
    attribution_on_foreground,
    foreground_fraction,
    foreground_score,
)
from bgbias.attribution.records import GROUND_TRUTH, SALIENCY, ImageScore
from bgbias.bgaugment.mask_check import saliency_masks
from bgbias.data.images import load_image, load_mask, load_matching_mask
from bgbias.data.items import Item
from bgbias.data.layout import describe_paths, missing_files
from bgbias.data.transforms import EvalGeometry, eval_transform, eval_transform_pair
from bgbias.errors import DatasetError, ImageError
from bgbias.methods.attribution import Attribution

if TYPE_CHECKING:
    from bgbias.methods.embedding_model import EmbeddingModel


@dataclass(frozen=True)
class MaskFile:
    """The mask an item is scored against, and where it comes from (``ground_truth`` or ``saliency``)."""

    path: Path
    source: str


def mask_files(items: Sequence[Item], masks_dir: Path, dataset_name: str) -> list[MaskFile]:
    """Each item's mask: its ground-truth mask where it has one, else its saliency mask under ``masks_dir``.

    Every file must exist (else a ``DatasetError`` / ``ImageError`` naming the missing ones and the fix).
    """
    shipped = [item.ground_truth_mask for item in items if item.ground_truth_mask is not None]
    missing = missing_files(shipped)
    if missing:
        raise DatasetError(
            f"{len(missing)} ground-truth masks listed by the dataset are missing: {describe_paths(missing)}",
            path=missing[0],
            fix="re-extract the dataset (its mask files) completely",
        )
    unshipped = [item for item in items if item.ground_truth_mask is None]
    saliency = iter(saliency_masks(unshipped, masks_dir, dataset_name))
    return [
        MaskFile(item.ground_truth_mask, GROUND_TRUTH)
        if item.ground_truth_mask is not None
        else MaskFile(next(saliency), SALIENCY)
        for item in items
    ]


def load_example(
    item: Item, mask: MaskFile, geometry: EvalGeometry, dataset_name: str
) -> tuple[np.ndarray, np.ndarray]:
    """The eval crop (uint8 H×W×3) and its soft mask (uint8 H×W) of one item."""
    image = load_image(item.image)
    if mask.source == SALIENCY:
        picture = load_matching_mask(mask.path, image.size, item, dataset_name)
    else:
        picture = load_mask(mask.path)
        if picture.size != image.size:
            raise ImageError(
                f"ground-truth mask size {picture.size} differs from image {item.id}'s size {image.size}",
                path=mask.path,
                fix="re-extract the dataset: its mask files must match its images",
            )
    return eval_transform_pair(image, picture, geometry)


def image_generator(seed: int, image_id: str) -> torch.Generator:
    """A CPU generator owned by one image: seeded by (seed, a hash of its id), not its batch or position."""
    key = int.from_bytes(hashlib.sha256(image_id.encode("utf-8")).digest()[:8], "big")
    state = np.random.SeedSequence([seed, key]).generate_state(2, np.uint32)
    return torch.Generator().manual_seed((int(state[0]) << 31) ^ int(state[1]))


def score_image(
    item: Item, source: str, mask: np.ndarray, attribution_map: np.ndarray, reference: Item | None = None
) -> ImageScore:
    """The foreground score of one map against its uint8 soft mask (divided by 255, not binarised); with the
    ``reference`` image the map was made against, where there is one."""
    soft = mask.astype(np.float64) / 255.0
    return ImageScore(
        id=item.id,
        label=item.label,
        mask_source=source,
        foreground_fraction=foreground_fraction(soft),
        attribution_on_foreground=attribution_on_foreground(soft, attribution_map),
        score=foreground_score(soft, attribution_map),
        reference=None if reference is None else reference.id,
        reference_label=None if reference is None else reference.label,
    )


@dataclass(eq=False)
class ImageScorer:
    """Loads, attributes and scores a list of item positions; shared by the main loop and the gallery.

    The attribution runs without autocast, in float32, whatever precision the model embeds in for
    evaluation (its ``amp``): every attribution is a gradient (SmoothGrad's, SAM's Grad-CAM, AVSL's), and in
    bfloat16 or float16 small gradients round to zero or lose the few bits that separate one pixel's
    attribution from its neighbour's. The model's memory format applies as it is (a layout changes only the
    order of the additions)."""

    model: EmbeddingModel
    attributor: Attribution
    items: Sequence[Item]
    masks: Sequence[MaskFile]
    geometry: EvalGeometry
    dataset_name: str
    device: torch.device
    seed: int
    references: dict[str, Item] | None = None
    """Each item's reference image by id, for an attribution that needs them (else None)."""

    def load(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        return load_example(self.items[index], self.masks[index], self.geometry, self.dataset_name)

    def reference(self, index: int) -> Item | None:
        return None if self.references is None else self.references[self.items[index].id]

    def load_reference(self, index: int) -> np.ndarray:
        """The eval crop (uint8 H×W×3) of an item's reference image."""
        reference = self.reference(index)
        assert reference is not None
        return eval_transform(load_image(reference.image), self.geometry)

    def __call__(self, indices: Sequence[int]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, ImageScore]]:
        examples = [self.load(index) for index in indices]
        images = self._tensor([image for image, _mask in examples])
        generators = [image_generator(self.seed, self.items[index].id) for index in indices]
        if self.references is None:
            maps = self.attributor(self.model, images, generators)
        else:
            references = self._tensor([self.load_reference(index) for index in indices])
            maps = self.attributor(self.model, images, generators, references)
        maps = maps.detach().float().cpu().numpy()
        results = []
        for index, (image, mask), attribution_map in zip(indices, examples, maps, strict=True):
            score = score_image(self.items[index], self.masks[index].source, mask, attribution_map,
                                self.reference(index))
            results.append((image, mask, attribution_map, score))
        return results

    def reference_map(self, index: int) -> np.ndarray:
        """The map of an item's reference image in their pair: the attribution with the roles swapped."""
        image, _mask = self.load(index)
        generator = image_generator(self.seed, self.items[index].id)
        maps = self.attributor(self.model, self._tensor([self.load_reference(index)]), [generator],
                               self._tensor([image]))
        return maps.detach().float().cpu().numpy()[0]

    def _tensor(self, pictures: Sequence[np.ndarray]) -> torch.Tensor:
        """uint8 H×W×3 pictures as a (B, 3, H, W) float batch in [0, 1] on the device."""
        pixels = np.stack(pictures).transpose(0, 3, 1, 2)
        return torch.from_numpy(pixels).to(self.device).float().div_(255)
