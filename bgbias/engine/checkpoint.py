"""Checkpoints: written atomically, read with ``torch.load(weights_only=True)``. ``last.pt`` holds all that
``--resume`` needs to continue exactly, ``best.pt`` the selected model; both plain dicts of tensors, numbers
and strings, so the safe loader reads them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from bgbias.errors import BgbiasError
from bgbias.fileio import atomic_file

FORMAT = 1


class CheckpointError(BgbiasError):
    """A checkpoint is missing, damaged or of another format."""


def save_checkpoint(path: str | os.PathLike[str], state: dict[str, Any]) -> None:
    # Through a file object: torch then names the archive's inner folder "archive", not after the temporary
    # file's random name, so equal states give equal bytes (and equal checkpoint digests in reports).
    with atomic_file(path) as handle:
        torch.save({"format": FORMAT, **state}, handle)


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a checkpoint safely (``weights_only=True``) and check its format."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError("the checkpoint does not exist", path=path,
                              fix="check the run folder (train writes checkpoints/last.pt and best.pt)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # damage shows up as many exception types (pickle, zip, EOF)
        raise CheckpointError(f"cannot read the checkpoint: {err}", path=path,
                              fix="resume from an intact run, or train again") from err
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError("this is not a bgbias checkpoint of a known format", path=path,
                              fix="use a checkpoint written by this version of bgbias train")
    return state
