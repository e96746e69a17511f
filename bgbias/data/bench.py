"""The bench built by ``bgbias assets``: ``index.csv`` (columns ``image,label,class_name,split,
ground_truth_mask``, paths relative to the root) beside ``bench.json``. Trainval classes are the train classes
then the val classes (each sorted), so the fixed split's validation starts after the last train class.
"""

from __future__ import annotations

import csv
from pathlib import Path

from bgbias.data.geometry import EvalGeometry, TrainGeometry
from bgbias.data.items import Catalog, Dataset, Item, make_item
from bgbias.data.layout import malformed_line, parse_int, require_files
from bgbias.data.registry import register_dataset
from bgbias.errors import DatasetError

HEADER = ["image", "label", "class_name", "split", "ground_truth_mask"]
BENCH_SPLITS = ("train", "val", "test")


@register_dataset("bench")
class BenchDataset(Dataset):
    index_file = "index.csv"
    obtain = "build the bench with `bgbias assets bench`"
    default_folder = "bench"
    # Native size: up-sampling the 128 px views adds nothing and costs ~3× (docs/bench-dataset.md, *Cost*).
    eval_geometry = EvalGeometry(resize=128, crop=128)
    train_geometry = TrainGeometry(resize=None, crop=128)
    protocol = "bench"

    def _read_catalog(self) -> Catalog:
        path = self.root / self.index_file
        fix = f"rebuild the bench with `bgbias assets bench` (index.csv columns: {','.join(HEADER)})"
        rows = self._rows(path, fix)
        items: list[Item] = []
        split_of: dict[int, str] = {}
        names: dict[int, str] = {}
        for number, row in rows:
            label = parse_int(row["label"], path, number, "label", fix)
            split = row["split"]
            if split not in BENCH_SPLITS:
                raise malformed_line(path, number, f"split {split!r} is not one of {', '.join(BENCH_SPLITS)}",
                                     fix)
            if split_of.setdefault(label, split) != split:
                raise malformed_line(path, number, f"class {label} is in split {split!r} here but in "
                                     f"{split_of[label]!r} before", fix)
            names.setdefault(label, row["class_name"])
            mask = row["ground_truth_mask"]
            items.append(make_item(self.root, row["image"], label,
                                   self.root.joinpath(*mask.split("/")) if mask else None))
        require_files([item.ground_truth_mask for item in items if item.ground_truth_mask is not None],
                      "ground-truth masks listed in index.csv", path, fix)
        train, val, test = ([c for c in sorted(split_of) if split_of[c] == name] for name in BENCH_SPLITS)
        return Catalog(items, train + val, test, len(train), names)

    @staticmethod
    def _rows(path: Path, fix: str) -> list[tuple[int, dict[str, str]]]:
        """The data rows of index.csv with their line numbers, after checking the header."""
        if not path.is_file():
            raise DatasetError("index.csv not found", path=path, fix=fix)
        with path.open(newline="", encoding="utf-8-sig") as handle:  # tolerate a BOM from spreadsheets
            reader = csv.reader(handle)
            try:
                header = next(reader, [])
                if header != HEADER:
                    raise malformed_line(path, 1, f"expected the header {','.join(HEADER)}, found {header}",
                                         fix)
                rows = []
                for fields in reader:
                    if not fields:
                        continue
                    if len(fields) != len(HEADER):
                        raise malformed_line(
                            path, reader.line_num, f"expected {len(HEADER)} fields, found {len(fields)}", fix
                        )
                    rows.append((reader.line_num, dict(zip(HEADER, fields, strict=True))))
            except (csv.Error, UnicodeDecodeError) as exc:
                raise DatasetError(f"index.csv cannot be parsed ({exc})", path=path, fix=fix) from exc
        return rows
