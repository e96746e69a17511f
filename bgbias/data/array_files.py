"""Numpy's ``.npy`` and ``.npz`` files read without trusting their headers: numpy allocates what a header
declares before reading a byte, so a hostile header ends in a memory error, not one naming the file. Each
array's declared size is checked against the bytes that follow it (a ``ValueError`` saying which array
declares what); pickled arrays are refused.
"""

from __future__ import annotations

import math
import os
import zipfile
from pathlib import Path
from typing import IO

import numpy as np

NPY = ".npy"


def load_npy(path: str | os.PathLike[str]) -> np.ndarray:
    """The array of the ``.npy`` file at ``path``, once its header's shape fits the bytes the file holds."""
    with open(path, "rb") as stream:
        _check_declared(stream, os.fstat(stream.fileno()).st_size, Path(path).name)
        stream.seek(0)
        return _read(stream, Path(path).name)


def load_npz(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` file at ``path``, by name (a member's name without ``.npy``, as
    ``np.load(path).files`` names them), each once its header fits the bytes its member holds."""
    arrays = {}
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            name = info.filename.removesuffix(NPY)
            with archive.open(info) as member:
                _check_declared(member, info.file_size, name)
            with archive.open(info) as member:
                arrays[name] = _read(member, name)
    return arrays


def _check_declared(stream: IO[bytes], size: int, name: str) -> None:
    """A ``ValueError`` unless the array whose header starts ``stream`` (``size`` bytes in all) declares as
    many bytes of data as follow its header."""
    version = np.lib.format.read_magic(stream)
    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
        np.lib.format.read_array_header_2_0
    shape, _, dtype = read_header(stream)
    if dtype.hasobject:
        raise ValueError(f"array {name} holds Python objects, which only unpickling could read")
    declared = math.prod(shape) * dtype.itemsize
    stored = size - stream.tell()
    if declared != stored:
        raise ValueError(f"the header of array {name} declares shape {shape} of {dtype} "
                         f"({declared:,} bytes), but {stored:,} bytes follow it")


def _read(stream: IO[bytes], name: str) -> np.ndarray:
    try:
        return np.lib.format.read_array(stream, allow_pickle=False)
    except MemoryError as exc:  # a zip member whose stated size lies as much as its header
        raise ValueError(f"array {name} is larger than this machine's memory") from exc
