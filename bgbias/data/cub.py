"""CUB-200-2011 in its official layout: ``images.txt``, ``image_class_labels.txt``, ``images/`` and, when the
separate segmentations archive is extracted beside them, ground-truth masks in ``segmentations/``."""

from __future__ import annotations

from pathlib import PurePosixPath

from bgbias.data.items import Catalog, Dataset, KnownSize, make_item
from bgbias.data.layout import malformed_line, parse_int, read_index_lines, require_files
from bgbias.data.registry import register_dataset
from bgbias.data.splits import partition_by_class_id
from bgbias.errors import DatasetError

NUM_CLASSES = 200
LAST_TRAIN_CLASS = 75
"""The paper's code's split (labels 0-based there: train < 75, val 75..99, test ≥ 100): classes 1–75 train,
76–100 val."""
LAST_TRAINVAL_CLASS = 100
IMAGES = 11788
"""Images of CUB-200-2011 (``images.txt``'s lines)."""
TEST_IMAGES = 5924
"""Images of its test classes (101–200)."""


@register_dataset("cub")
class CubDataset(Dataset):
    index_file = "images.txt"
    obtain = "download CUB_200_2011.tgz and extract it; the dataset root is the CUB_200_2011 folder"
    default_folder = "CUB_200_2011"
    published = True
    known_size = KnownSize(IMAGES, NUM_CLASSES, TEST_IMAGES, LAST_TRAIN_CLASS, LAST_TRAINVAL_CLASS)

    def _read_catalog(self) -> Catalog:
        fix = "restore images.txt from the CUB_200_2011 archive (lines: '<image id> <path under images/>')"
        relpaths = {image_id: value for image_id, (_, value) in self._by_image_id("images.txt", fix).items()}
        labels = self._class_labels()
        labels_file = self.root / "image_class_labels.txt"
        same = "use the images.txt and image_class_labels.txt of the same CUB_200_2011 archive"
        if unlabelled := sorted(set(relpaths) - set(labels)):
            raise DatasetError(f"{len(unlabelled)} image ids of images.txt have no line in "
                               f"image_class_labels.txt (first: {unlabelled[0]})", path=labels_file, fix=same)
        if unknown := sorted(set(labels) - set(relpaths)):
            raise DatasetError(f"{len(unknown)} image ids of image_class_labels.txt are not in images.txt "
                               f"(first: {unknown[0]})", path=labels_file, fix=same)
        masks_dir = self.root / "segmentations"
        has_masks = masks_dir.is_dir()
        items = [
            make_item(
                self.root,
                f"images/{relpath}",
                labels[image_id],
                masks_dir.joinpath(*PurePosixPath(relpath).with_suffix(".png").parts) if has_masks else None,
            )
            for image_id, relpath in relpaths.items()
        ]
        if has_masks:
            require_files([item.ground_truth_mask for item in items if item.ground_truth_mask is not None],
                          "ground-truth masks", masks_dir, fix=f"extract segmentations.tgz completely into "
                          f"{self.root}, or remove the incomplete segmentations folder")
        trainval, test, val_start = partition_by_class_id(labels.values(), LAST_TRAIN_CLASS,
                                                          LAST_TRAINVAL_CLASS)
        # A class's folder under images/ is its name (``001.Black_footed_Albatross``), as in classes.txt.
        names = {labels[image_id]: PurePosixPath(relpath).parent.name or str(labels[image_id])
                 for image_id, relpath in relpaths.items()}
        return Catalog(items, trainval, test, val_start, names)

    def _class_labels(self) -> dict[int, int]:
        """image_class_labels.txt: ``<image id> <class id 1..200>``."""
        path = self.root / "image_class_labels.txt"
        fix = "restore image_class_labels.txt from the CUB_200_2011 archive (lines: '<image id> <class id>')"
        labels: dict[int, int] = {}
        for image_id, (number, value) in self._by_image_id(path.name, fix).items():
            label = parse_int(value, path, number, "class id", fix)
            if not 1 <= label <= NUM_CLASSES:
                raise malformed_line(path, number, f"class id {label} is outside 1..{NUM_CLASSES}", fix)
            labels[image_id] = label
        return labels

    def _by_image_id(self, filename: str, fix: str) -> dict[int, tuple[int, str]]:
        """The ``<image id> <value>`` lines of ``filename``: each value, with its line number, by image id."""
        path = self.root / filename
        lines: dict[int, tuple[int, str]] = {}
        for number, fields in read_index_lines(path, fix):
            if len(fields) != 2:
                raise malformed_line(path, number, f"expected 2 fields, found {len(fields)}", fix)
            image_id = parse_int(fields[0], path, number, "image id", fix)
            if image_id in lines:
                raise malformed_line(path, number, f"image id {image_id} appears twice", fix)
            lines[image_id] = (number, fields[1])
        return lines
