"""Cars196 in its official layout: ``cars_annos.mat`` (a struct per image with ``relative_im_path``, ``class``
1..196 and the unused train/test flag; ``class_names`` where present) and ``car_ims/``."""

from __future__ import annotations

import numpy as np

from bgbias.data.items import Catalog, Dataset, Item, KnownSize, make_item
from bgbias.data.registry import register_dataset
from bgbias.data.splits import partition_by_class_id
from bgbias.errors import DatasetError

NUM_CLASSES = 196
LAST_TRAIN_CLASS = 74
"""The paper's code's split (labels 0-based there: train < 74, val 74..97, test ≥ 98): classes 1–74 train,
75–98 val."""
LAST_TRAINVAL_CLASS = 98
IMAGES = 16185
"""Images of Cars196 (``cars_annos.mat``'s annotations)."""
TEST_IMAGES = 8131
"""Images of its test classes (99–196)."""
REQUIRED_FIELDS = ("relative_im_path", "class")


@register_dataset("cars")
class CarsDataset(Dataset):
    index_file = "cars_annos.mat"
    obtain = "download car_ims.tgz and cars_annos.mat into one folder and extract car_ims.tgz there"
    default_folder = "cars196"
    published = True
    known_size = KnownSize(IMAGES, NUM_CLASSES, TEST_IMAGES, LAST_TRAIN_CLASS, LAST_TRAINVAL_CLASS)

    def _read_catalog(self) -> Catalog:
        annotations, names = self._annotations()
        items = [self._item(number, record) for number, record in enumerate(annotations, start=1)]
        trainval, test, val_start = partition_by_class_id((item.label for item in items), LAST_TRAIN_CLASS,
                                                          LAST_TRAINVAL_CLASS)
        return Catalog(items, trainval, test, val_start, names)

    def _annotations(self) -> tuple[np.ndarray, dict[int, str]]:
        """The ``annotations`` struct array as a 1-D record array, and the classes' names by class id."""
        # Imported here for start-up: the CLI imports every layout to list --dataset (docs/design.md).
        from scipy.io import loadmat

        path = self.root / self.index_file
        fix = "download cars_annos.mat again (the Cars196 annotation file with one struct per image)"
        try:
            contents = loadmat(path, squeeze_me=True)
        except Exception as exc:  # scipy raises MatReadError, ValueError, IndexError, ... on damaged files
            raise DatasetError(f"cannot read {path.name} as a MATLAB file ({exc})", path=path,
                               fix=fix) from exc
        annotations = contents.get("annotations")
        fields = getattr(getattr(annotations, "dtype", None), "names", None) or ()
        missing = [field for field in REQUIRED_FIELDS if field not in fields]
        if missing:
            raise DatasetError(f"{path.name} has no 'annotations' struct array with the fields "
                               f"{', '.join(missing)}", path=path, fix=fix)
        names = np.atleast_1d(contents.get("class_names", []))
        named = {index: name for index, name in enumerate(names.tolist(), start=1) if isinstance(name, str)}
        return np.atleast_1d(annotations), named

    def _item(self, number: int, record: np.void) -> Item:
        path = self.root / self.index_file
        relpath = record["relative_im_path"]
        if not isinstance(relpath, str) or not relpath:
            raise DatasetError(f"annotation {number} of {path.name} has no relative_im_path string (found "
                               f"{relpath!r})", path=path, fix="download cars_annos.mat again")
        label = class_id(record["class"])
        if label is None:
            raise DatasetError(f"annotation {number} of {path.name} ({relpath}) has class "
                               f"{record['class']!r}, not an integer in 1..{NUM_CLASSES}", path=path,
                               fix="download cars_annos.mat again")
        return make_item(self.root, relpath, label)


def class_id(value: object) -> int | None:
    """A Cars196 class id (1..196) from a MATLAB scalar, or ``None`` if it is not one."""
    try:
        label = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None
    return label if 1 <= label <= NUM_CLASSES else None
