"""Tiny replicas of the datasets in their exact official layouts, for tests.

Every image is a real 32×24 JPEG or PNG: a plain background with a rectangular object whose exact mask is
known (``picture``), distinct and deterministic per image, so mask and training tests can use them too.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

IMAGE_SIZE = (32, 24)
OBJECT_BOX = (8, 6, 23, 17)
"""The object's rectangle (inclusive corners, as ``ImageDraw.rectangle`` takes them)."""

SOP_TRAIN_CLASS_IDS = (1, 2, 3, 8488, 8489, 8490, 8491, 11318)
"""Both sides of the paper's code's train/val boundary at class id 8489."""
SOP_TEST_CLASS_IDS = (11319, 11320, 22634)
SOP_SUPER_CLASSES = ("bicycle", "cabinet", "chair")
FOLDER_CLASS_NAMES = ("zebra", "ant", "Bee", "cat", "dog", "eel", "fox", "gnu")
"""Not in sorted order (and mixed case), so tests see that labels follow the sorted names."""


def picture(index: int, size: tuple[int, int] = IMAGE_SIZE) -> tuple[Image.Image, Image.Image]:
    """An RGB image (object rectangle on a plain background) and its exact "L" mask, fixed by ``index``."""
    rng = np.random.default_rng(index)
    background, foreground = (tuple(int(v) for v in rng.integers(0, 256, 3)) for _ in range(2))
    image = Image.new("RGB", size, background)
    ImageDraw.Draw(image).rectangle(OBJECT_BOX, fill=foreground)
    mask = Image.new("L", size, 0)
    ImageDraw.Draw(mask).rectangle(OBJECT_BOX, fill=255)
    return image, mask


def write_picture(path: Path, index: int, mask_path: Path | None = None) -> None:
    """Write ``picture(index)`` to ``path`` (format from the suffix) and optionally its mask as PNG."""
    image, mask = picture(index)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, format="JPEG" if path.suffix.lower() in {".jpg", ".jpeg"} else "PNG")
    if mask_path is not None:
        mask_path.parent.mkdir(parents=True, exist_ok=True)
        mask.save(mask_path, format="PNG")


def make_cub(root: Path, n_classes: int = 200, per_class: int = 1, segmentations: bool = True) -> Path:
    """CUB_200_2011: images.txt, image_class_labels.txt, classes.txt, train_test_split.txt, images/ and
    (optionally) segmentations/. Class ids 1..``n_classes``."""
    images, labels, classes, split = [], [], [], []
    image_id = 0
    for class_id in range(1, n_classes + 1):
        folder = f"{class_id:03d}.Bird_{class_id:03d}"
        classes.append(f"{class_id} {folder}")
        for k in range(per_class):
            image_id += 1
            relpath = f"{folder}/Bird_{class_id:03d}_{k:04d}_{image_id}.jpg"
            mask = root / "segmentations" / Path(relpath).with_suffix(".png") if segmentations else None
            write_picture(root / "images" / relpath, image_id, mask)
            images.append(f"{image_id} {relpath}")
            labels.append(f"{image_id} {class_id}")
            split.append(f"{image_id} {k % 2}")
    for name, lines in [
        ("images.txt", images),
        ("image_class_labels.txt", labels),
        ("classes.txt", classes),
        ("train_test_split.txt", split),
    ]:
        (root / name).write_text("\n".join(lines) + "\n")
    return root


def make_cars(root: Path, n_classes: int = 196, per_class: int = 1,
              class_ids: Sequence[int] | None = None) -> Path:
    """cars196: cars_annos.mat (struct array ``annotations`` and cell ``class_names``) and car_ims/. Class ids
    1..``n_classes``, or ``class_ids`` (a few on both sides of each split boundary keep every split small)."""
    from scipy.io import savemat

    class_ids = list(class_ids or range(1, n_classes + 1))
    fields = ["relative_im_path", "bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "test"]
    annotations = np.zeros((1, len(class_ids) * per_class), dtype=[(name, "O") for name in fields])
    for index in range(len(class_ids) * per_class):
        relpath = f"car_ims/{index + 1:06d}.jpg"
        write_picture(root / relpath, index)
        x1, y1, x2, y2 = OBJECT_BOX
        class_id = class_ids[index // per_class]
        annotations[0, index] = (
            relpath,
            np.uint8(x1),
            np.uint8(y1),
            np.uint8(x2),
            np.uint8(y2),
            np.uint8(class_id),
            np.uint8(index % 2),
        )
    class_names = np.empty((1, max(class_ids)), dtype=object)
    class_names[0, :] = [f"Car Model {c} 2012" for c in range(1, max(class_ids) + 1)]
    savemat(root / "cars_annos.mat", {"annotations": annotations, "class_names": class_names})
    return root


def make_sop(
    root: Path,
    train_class_ids: Sequence[int] = SOP_TRAIN_CLASS_IDS,
    test_class_ids: Sequence[int] = SOP_TEST_CLASS_IDS,
    per_class: int = 2,
) -> Path:
    """Stanford_Online_Products: Ebay_train.txt, Ebay_test.txt, one ``<super class>_final/`` folder each."""
    header = "image_id class_id super_class_id path"
    image_id = 0
    for filename, class_ids in [("Ebay_train.txt", train_class_ids), ("Ebay_test.txt", test_class_ids)]:
        lines = [header]
        for class_id in class_ids:
            super_id = class_id % len(SOP_SUPER_CLASSES) + 1
            for k in range(per_class):
                image_id += 1
                relpath = f"{SOP_SUPER_CLASSES[super_id - 1]}_final/{100000000000 + class_id}_{k}.JPG"
                write_picture(root / relpath, image_id)
                lines.append(f"{image_id} {class_id} {super_id} {relpath}")
        (root / filename).write_text("\n".join(lines) + "\n")
    return root


def make_folder(root: Path, class_names: Sequence[str] = FOLDER_CLASS_NAMES, per_class: int = 2) -> Path:
    """``root/<class>/<image>``, alternating JPEG and PNG files."""
    index = 0
    for name in class_names:
        for k in range(per_class):
            write_picture(root / name / f"img_{k}.{'jpg' if k % 2 == 0 else 'png'}", index)
            index += 1
    return root


def make_bench(
    root: Path, train_classes: int = 3, val_classes: int = 2, test_classes: int = 3, per_class: int = 2
) -> Path:
    """A bench: index.csv (image,label,class_name,split,ground_truth_mask), bench.json, images/ and masks/."""
    splits = ["train"] * train_classes + ["val"] * val_classes + ["test"] * test_classes
    rows = []
    index = 0
    for label, split in enumerate(splits):
        name = f"stamp_{label:03d}"
        for k in range(per_class):
            image, mask = f"images/{name}/{k}.jpg", f"masks/{name}/{k}.png"
            write_picture(root / image, index, root / mask)
            rows.append([image, str(label), name, split, mask])
            index += 1
    with (root / "index.csv").open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["image", "label", "class_name", "split", "ground_truth_mask"])
        writer.writerows(rows)
    (root / "bench.json").write_text(
        json.dumps({"classes": len(splits), "images": len(rows)}, indent=2) + "\n"
    )
    return root


def copy_ground_truth_masks(items: Sequence, masks_dir: Path) -> Path:
    """Each item's exact mask where ``bgbias masks`` writes its saliency mask (stand-in masks)."""
    from bgbias.saliency.ground_truth import copy_ground_truth_masks as copy_masks

    return copy_masks(items, masks_dir).out_dir
