"""A user's embeddings of an evaluation's sets, read from files laid out as ``bgbias corrupt --render`` lays
out the images (docs/embeddings.md, *The layout*): one file per set, rows keyed by image, checked strictly.

Anything that is not a set of the layout is refused (hidden entries and a top-level ``report/`` aside), so a
misnamed file never goes unscored in silence.
"""

from __future__ import annotations

import posixpath
import re
import zipfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bgbias.assets.digest import sha256_file
from bgbias.data.array_files import load_npy, load_npz
from bgbias.errors import DatasetError, OptionError
from bgbias.variants.variants import VARIANTS

NPZ, NPY, IDS, PARQUET = ".npz", ".npy", ".ids.txt", ".parquet"
SUFFIXES = (IDS, NPZ, NPY, PARQUET)
"""The files of the layout, by suffix (``.ids.txt`` first: it ends like no other)."""
NPZ_ARRAYS = ("embeddings", "ids")
PARQUET_COLUMNS = ("embedding", "id")
REPORT_FOLDER = "report"
"""Where ``bgbias score`` writes its report by default, inside the embeddings folder (never read as a set)."""
SET_NAME = re.compile(rf"(clean|(({'|'.join(map(re.escape, VARIANTS))})/)?repeat-\d+)")
"""What a set of the layout is called (which of them a scoring reads is its options' choice)."""
SHOWN = 3
"""How many ids an error lists."""


def image_key(image_id: str) -> str:
    """The layout's id of a dataset image: its id (its path in the dataset) without the file's suffix."""
    return posixpath.splitext(image_id)[0]


@dataclass(frozen=True)
class SetFiles:
    """The files of one set: ``data`` (``.npz``, ``.npy`` or ``.parquet``) and, for ``.npy``, ``ids``."""

    name: str
    data: Path
    ids: Path | None = None

    @property
    def paths(self) -> tuple[Path, ...]:
        return (self.data,) if self.ids is None else (self.data, self.ids)


@dataclass(frozen=True)
class SetEmbeddings:
    """One set's embeddings in the split's order, and the sha256 of each file they were read from."""

    files: SetFiles
    embeddings: np.ndarray
    sha256: dict[str, str]


class EmbeddingFolder:
    """The embeddings of ``names`` (layout names, scoring order) of the split whose images have ``ids``, in
    ``folder``; every set's files are found (or the folder refused) when it is opened, each set read and
    checked when asked for, so at most one set besides the caller's is in memory."""

    def __init__(self, folder: str | Path, names: Sequence[str], ids: Sequence[str], l2_normalize: bool):
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise OptionError("there is no folder of embeddings here", path=self.folder,
                              fix="pass the folder holding clean.npz (or .npy/.parquet) and one file per "
                                  "corrupted set, as docs/embeddings.md lays out")
        self.keys = [image_key(image_id) for image_id in ids]
        twice = [key for key, count in Counter(self.keys).items() if count > 1]
        if twice:
            raise DatasetError(f"{len(twice)} images of the split share their path without its suffix "
                               f"(first: {_listed(twice)}), which is their id in an embeddings file",
                               fix="rename those images so that no two differ only in their suffix")
        self.row_of = {key: row for row, key in enumerate(self.keys)}
        self.l2_normalize = l2_normalize
        self.sets = find_set_files(self.folder, names)
        self.width: tuple[str, int] | None = None
        """The first set read and its embeddings' width, which every other set must have."""

    def read(self, name: str) -> SetEmbeddings:
        """Set ``name``'s embeddings as float32 (N, D), row ``i`` the split's image ``i`` (L2-normalised
        where asked), after every check."""
        files = self.sets[name]
        ids, embeddings = _read_files(files)
        _check_values(files, ids, embeddings)
        self._check_width(files, embeddings.shape[1])
        rows = self._rows(files, ids)
        ordered = np.empty_like(embeddings, dtype=np.float32)
        ordered[rows] = embeddings
        if self.l2_normalize:
            ordered = _unit_rows(files, ordered, self.keys)
        return SetEmbeddings(files, ordered, {str(path): sha256_file(path) for path in files.paths})

    def _check_width(self, files: SetFiles, width: int) -> None:
        if self.width is None:
            self.width = (files.name, width)
        elif self.width[1] != width:
            raise OptionError(f"the embeddings of set {files.name} have {width} dimensions, those of set "
                              f"{self.width[0]} {self.width[1]}", path=files.data,
                              fix="embed every set with the same model, so that all are equally wide")

    def _rows(self, files: SetFiles, ids: Sequence[str]) -> np.ndarray:
        """Where each of the file's rows goes in the split's order; every problem with the ids named."""
        where = files.ids or files.data
        twice = [key for key, count in Counter(ids).items() if count > 1]
        if twice:
            raise OptionError(f"{len(twice)} ids have more than one row (first: {_listed(twice)})",
                              path=where, fix="give each image of the set exactly one row")
        extra = [key for key in ids if key not in self.row_of]
        if extra:
            suffixed = [key for key in extra if image_key(key) in self.row_of]
            hint = (" (an id is the image's path without its suffix: "
                    f"{image_key(suffixed[0])}, not {suffixed[0]})" if suffixed else "")
            raise OptionError(f"{len(extra)} ids are no image of the split (first: {_listed(extra)}){hint}",
                              path=where, fix="keep only the split's images, each under its path in the set "
                                              "without the file's suffix (docs/embeddings.md)")
        if len(ids) < len(self.keys):
            given = set(ids)
            missing = [key for key in self.keys if key not in given]
            raise OptionError(f"{len(missing)} of the split's {len(self.keys)} images have no row (first: "
                              f"{_listed(missing)})", path=where,
                              fix=f"embed every image of the rendered set {files.name} (and of the split for "
                                  "clean)")
        return np.array([self.row_of[key] for key in ids], dtype=np.int64)


def find_set_files(folder: Path, names: Sequence[str]) -> dict[str, SetFiles]:
    """The files of each set ``names`` lists, found in ``folder``; an ``OptionError`` naming the file for an
    entry that is no set of the layout, a set given twice or half, and the sets that are missing."""
    found: dict[str, dict[str, Path]] = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        hidden = any(part.startswith(".") for part in relative.parts)
        if hidden or relative.parts[0] == REPORT_FOLDER or path.is_dir():
            continue
        posix = relative.as_posix()
        suffix = next((s for s in SUFFIXES if posix.endswith(s)), None)
        name = posix[:-len(suffix)] if suffix is not None else None
        if name is None or not SET_NAME.fullmatch(name):
            raise OptionError("the embeddings folder holds a file that is no set of its layout", path=path,
                              fix="name each set's file as docs/embeddings.md says (clean.npz, repeat-0.npz, "
                                  "only-fg/repeat-0.npz, ...), or move this file out of the folder")
        found.setdefault(name, {})[suffix] = path
    missing = [name for name in names if name not in found]
    if missing:
        raise OptionError(f"{len(missing)} sets have no embeddings file: {', '.join(missing[:8])}"
                          f"{' ...' if len(missing) > 8 else ''}", path=folder,
                          fix="embed each set's images (bgbias corrupt --render writes them, one folder per "
                              "set) and save them as <set>.npz (or .npy with .ids.txt, or .parquet)")
    return {name: _set_files(name, found[name]) for name in names}


def _set_files(name: str, given: dict[str, Path]) -> SetFiles:
    data = [given[suffix] for suffix in (NPZ, NPY, PARQUET) if suffix in given]
    if len(data) > 1:
        shown = ", ".join(path.name for path in data)
        raise OptionError(f"set {name} has {len(data)} files of embeddings: {shown}", path=data[0].parent,
                          fix="keep one file per set")
    if not data:
        raise OptionError(f"set {name} has ids but no embeddings", path=given[IDS],
                          fix=f"put its (N, D) array beside them as {name}.npy")
    if data[0].name.endswith(NPY) and IDS not in given:
        raise OptionError(f"set {name}'s .npy file has no ids beside it", path=data[0],
                          fix=f"write its image ids, one per line in row order, to {name}.ids.txt (or save "
                              "both as one .npz with arrays ids and embeddings)")
    if not data[0].name.endswith(NPY) and IDS in given:
        raise OptionError(f"set {name} has an ids file beside a {data[0].suffix} file, which holds its ids",
                          path=given[IDS], fix="remove the .ids.txt file")
    return SetFiles(name, data[0], given.get(IDS))


def _read_files(files: SetFiles) -> tuple[list[str], np.ndarray]:
    """The ids and the array a set's files hold, as stored."""
    if files.data.name.endswith(PARQUET):
        return _read_parquet(files.data)
    try:
        if files.data.name.endswith(NPZ):
            stored = load_npz(files.data)
            if sorted(stored) != sorted(NPZ_ARRAYS):
                held = ", ".join(sorted(stored)) or "none"
                raise OptionError(f"the file holds the arrays {held}, not ids and embeddings",
                                  path=files.data,
                                  fix="save exactly two: np.savez(path, ids=ids, embeddings=embeddings)")
            raw_ids, embeddings = stored["ids"], stored["embeddings"]
            if raw_ids.ndim != 1 or raw_ids.dtype.kind != "U":
                raise OptionError(f"its ids are an array of shape {raw_ids.shape} and dtype {raw_ids.dtype}",
                                  path=files.data, fix="save the ids as a 1-D array of strings")
            ids = raw_ids.tolist()
        else:
            embeddings = load_npy(files.data)
            ids = _read_ids(files.ids)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:  # a damaged or pickled file
        raise OptionError(f"the file cannot be read as numpy data ({exc})", path=files.data,
                          fix="save it with numpy (np.save / np.savez) from numeric arrays") from exc
    return ids, embeddings


def _read_ids(path: Path | None) -> list[str]:
    assert path is not None  # _set_files pairs every .npy with its ids
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()  # a byte order mark is no part of an id
    except UnicodeDecodeError as exc:
        raise OptionError("the ids file is not UTF-8 text", path=path,
                          fix="write one id per line, UTF-8") from exc
    if "" in lines:
        raise OptionError(f"line {lines.index('') + 1} of the ids file is empty", path=path,
                          fix="write exactly one id per line, one line per row of the .npy file")
    return lines


def _read_parquet(path: Path) -> tuple[list[str], np.ndarray]:
    try:
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise OptionError("reading Parquet needs pyarrow, which is not installed", path=path,
                          fix="pip install pyarrow, or save the set as .npz (ids and embeddings)") from exc
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow's errors have no common base below Exception
        raise OptionError(f"the file cannot be read as Parquet ({exc})", path=path,
                          fix="write it with pyarrow or pandas") from exc
    if sorted(table.column_names) != sorted(PARQUET_COLUMNS):
        raise OptionError(f"the file has the columns {', '.join(table.column_names) or 'none'}", path=path,
                          fix="write exactly two columns: id (string) and embedding (a list of numbers)")
    ids = table.column("id")
    if str(ids.type) not in ("string", "large_string") or ids.null_count:
        raise OptionError(f"its id column is of type {ids.type}{' with nulls' if ids.null_count else ''}",
                          path=path, fix="write the ids as strings, one per row")
    column = table.column("embedding").combine_chunks()
    if not hasattr(column, "flatten") or column.null_count:
        raise OptionError(f"its embedding column is of type {column.type}", path=path,
                          fix="write each row's embedding as a list of numbers")
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
    if len(lengths) and (lengths != lengths[0]).any():
        raise OptionError("its rows' embeddings are not all of one length", path=path,
                          fix="write every row's embedding with the same number of dimensions")
    values = column.flatten().to_numpy(zero_copy_only=False)
    width = int(lengths[0]) if len(lengths) else 0
    return ids.to_pylist(), values.reshape(len(lengths), width)


def _check_values(files: SetFiles, ids: Sequence[str], embeddings: np.ndarray) -> None:
    fix = "save one row per image: an (images, dimensions) array of finite floats"
    if embeddings.dtype.kind not in "fiu":
        raise OptionError(f"the embeddings are of dtype {embeddings.dtype}, not real numbers",
                          path=files.data, fix=fix)
    if embeddings.ndim != 2 or embeddings.shape[1] == 0:
        raise OptionError(f"the embeddings have shape {embeddings.shape}, not (images, dimensions)",
                          path=files.data, fix=fix)
    if len(ids) != len(embeddings):
        raise OptionError(f"{len(embeddings)} rows of embeddings for {len(ids)} ids",
                          path=files.ids or files.data, fix="give exactly one id per row, in row order")
    finite = np.isfinite(embeddings).all(axis=1)
    if not finite.all():
        bad = [ids[row] for row in np.flatnonzero(~finite)]
        raise OptionError(f"{len(bad)} rows hold NaN or infinite values (first: {_listed(bad)})",
                          path=files.data, fix="embed those images again; every value must be finite")


def _unit_rows(files: SetFiles, embeddings: np.ndarray, keys: Sequence[str]) -> np.ndarray:
    norms = np.linalg.norm(embeddings, axis=1, keepdims=True)
    zero = np.flatnonzero(norms[:, 0] == 0)
    if len(zero):
        raise OptionError(f"{len(zero)} rows are all zeros and have no direction to L2-normalise (first: "
                          f"{_listed([keys[row] for row in zero])})", path=files.data,
                          fix="embed those images again, or score without L2-normalising")
    return embeddings / norms


def _listed(ids: Sequence[str]) -> str:
    return ", ".join(ids[:SHOWN]) + (" ..." if len(ids) > SHOWN else "")
