"""MaskedImages: a split as (image, mask, label) samples, batched by torch's default collate for BGAugment."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from bgbias.bgaugment.bgaugment import BGAugment
from bgbias.bgaugment.masked_images import MaskedImages
from bgbias.data.splits import split_items
from bgbias.errors import ImageError, OptionError


def test_samples_batch_into_what_bgaugment_takes(bench, masks_dir, backgrounds):
    images = MaskedImages("bench", bench.root, masks=masks_dir, crop=16)
    items = split_items(bench, "train")
    assert len(images) == len(items) and images.num_classes == len({item.label for item in items})
    loader = DataLoader(images, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(0))
    pixels, masks, labels = next(iter(loader))
    assert pixels.dtype == masks.dtype == torch.uint8
    assert pixels.shape == (4, 3, 16, 16) and masks.shape == (4, 1, 16, 16)
    assert labels.dtype == torch.int64 and set(labels.tolist()) <= set(range(images.num_classes))
    out = BGAugment(backgrounds, seed=0)(pixels, masks)
    assert out.shape == (4, 3, 16, 16) and out.dtype == torch.float32


def test_a_bgaugment_transform_composites_each_sample_behind_its_mask(bench, masks_dir, backgrounds):
    plain = MaskedImages("bench", bench.root, masks=masks_dir, crop=16)
    augment = BGAugment(backgrounds, seed=0)
    composited = MaskedImages("bench", bench.root, masks=masks_dir, crop=16, transform=augment)
    torch.manual_seed(1)
    image, mask, label = plain[4]
    torch.manual_seed(1)  # the same crop, now through BGAugment
    pixels, same_mask, same_label = composited[4]
    assert torch.equal(mask, same_mask) and label == same_label
    assert pixels.dtype == torch.float32 and pixels.shape == (3, 16, 16)
    assert torch.equal(pixels, augment(image, mask, generator=torch.Generator().manual_seed(0)))
    background = mask[0] == 0
    assert background.any() and not torch.allclose(pixels[:, background], image[:, background] / 255)
    with pytest.raises(OptionError, match="transform=3 is not callable"):
        MaskedImages("bench", bench.root, masks=masks_dir, transform=3)


def test_crops_are_fresh_per_access_and_follow_torchs_seed(bench, masks_dir):
    images = MaskedImages("bench", bench.root, masks=masks_dir, crop=16)
    torch.manual_seed(3)
    first = [images[0][0] for _ in range(4)]
    torch.manual_seed(3)
    again = [images[0][0] for _ in range(4)]
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(torch.equal(first[0], other) for other in first[1:])


def test_the_mask_is_cut_with_its_image(bench, masks_dir):
    image, mask, _ = MaskedImages("bench", bench.root, masks=masks_dir, split="test", crop=24)[5]
    # The replica's object is one colour on a plain background: the mask covers exactly its pixels.
    inside = image[:, mask[0] > 200].float()
    assert inside.numel() and np.allclose(inside.std(dim=1).numpy(), 0, atol=12)


def test_missing_masks_are_named_with_the_command_that_makes_them(bench, tmp_path):
    with pytest.raises(ImageError, match="bgbias masks --dataset bench"):
        MaskedImages("bench", bench.root, masks=tmp_path / "nowhere")


@pytest.mark.parametrize("layout", ["cub", "cars", "sop", "folder"])
def test_every_layout_gives_samples_with_contiguous_labels(layout, tmp_path):
    from bgbias.data.items import mask_path
    from bgbias.data.registry import open_dataset
    from tests import replicas

    make = {"cub": lambda root: replicas.make_cub(root, n_classes=6),
            "cars": lambda root: replicas.make_cars(root, n_classes=6),
            "sop": replicas.make_sop, "folder": replicas.make_folder}[layout]
    root = make(tmp_path / layout)
    mask = replicas.picture(0)[1]  # every replica image has its object in the same rectangle
    for item in open_dataset(layout, root).items():
        target = mask_path(item, tmp_path / "masks")
        target.parent.mkdir(parents=True, exist_ok=True)
        mask.save(target)
    images = MaskedImages(layout, root, masks=tmp_path / "masks", crop=16)
    image, image_mask, label = images[0]
    assert image.shape == (3, 16, 16) and image_mask.shape == (1, 16, 16)
    assert sorted(set(images.labels)) == list(range(images.num_classes)) and 0 <= label < images.num_classes
