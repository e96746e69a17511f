"""Stanford Online Products in its official layout: ``Ebay_train.txt`` and ``Ebay_test.txt`` (header
``image_id class_id super_class_id path``) and one image folder per super class. Fixed split as the paper's
code reads it (``label < 8489`` of 0-based labels trains): in the dataset's own 1-based class ids, train =
1..8489, val = 8490..11318, test = Ebay_test (11319..22634); labels stay 1-based.
"""

from __future__ import annotations

from bgbias.data.items import Catalog, Dataset, Item, KnownSize, make_item
from bgbias.data.layout import malformed_line, parse_int, read_index_lines
from bgbias.data.registry import register_dataset
from bgbias.errors import DatasetError

LAST_TRAIN_CLASS = 8489
LAST_TRAINVAL_CLASS = 11318
"""Ebay_train's last class id: Ebay_test holds the 11,316 classes after it."""
NUM_CLASSES = 22634
IMAGES = 120053
"""Images of SOP (``Ebay_train.txt`` and ``Ebay_test.txt`` together)."""
TEST_IMAGES = 60502
"""Images of ``Ebay_test.txt``."""
HEADER = ["image_id", "class_id", "super_class_id", "path"]
TRAIN_FILE = "Ebay_train.txt"
TEST_FILE = "Ebay_test.txt"


@register_dataset("sop")
class SopDataset(Dataset):
    index_file = TRAIN_FILE
    obtain = (
        "download Stanford_Online_Products.zip and extract it; the dataset root is Stanford_Online_Products"
    )
    default_folder = "Stanford_Online_Products"
    published = True
    known_size = KnownSize(IMAGES, NUM_CLASSES, TEST_IMAGES, LAST_TRAIN_CLASS, LAST_TRAINVAL_CLASS)

    def _read_catalog(self) -> Catalog:
        train_items = self._read_list(TRAIN_FILE)
        test_items = self._read_list(TEST_FILE)
        trainval = sorted({item.label for item in train_items})
        test = sorted({item.label for item in test_items})
        shared = sorted(set(trainval) & set(test))
        if shared:
            raise DatasetError(
                f"{len(shared)} class ids appear in both {TRAIN_FILE} and {TEST_FILE} (first: {shared[0]})",
                path=self.root / TEST_FILE,
                fix="use the Ebay_train.txt and Ebay_test.txt of the same Stanford_Online_Products archive",
            )
        val_start = sum(1 for c in trainval if c <= LAST_TRAIN_CLASS)
        return Catalog(train_items + test_items, trainval, test, val_start)

    def _read_list(self, filename: str) -> list[Item]:
        path = self.root / filename
        fix = f"restore {filename} from the Stanford_Online_Products archive (header: {' '.join(HEADER)})"
        lines = read_index_lines(path, fix)
        number, header = next(lines, (1, []))
        if header != HEADER:
            found = f"'{' '.join(header)}'" if header else "an empty file"
            raise malformed_line(
                path, number, f"expected the header '{' '.join(HEADER)}', found {found}", fix
            )
        items = []
        for number, fields in lines:
            if len(fields) != len(HEADER):
                raise malformed_line(path, number, f"expected {len(HEADER)} fields, found {len(fields)}", fix)
            parse_int(fields[0], path, number, "image_id", fix)
            label = parse_int(fields[1], path, number, "class_id", fix)
            parse_int(fields[2], path, number, "super_class_id", fix)
            if label < 1:
                raise malformed_line(path, number, f"class_id {label} is not positive", fix)
            items.append(make_item(self.root, fields[3], label))
        return items
