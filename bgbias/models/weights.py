"""Weight files: read a state dict safely, fit it onto a model key by key, fetch the files we may download.
A backbone that silently kept some random tensors would give plausible but wrong numbers, so every key must
fit both ways (``unused`` names the exceptions); the first one that does not is named.
"""

from __future__ import annotations

import os
import shutil
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from bgbias.errors import AssetError
from bgbias.fileio import atomic_path
from bgbias.paths import bgbias_home

if TYPE_CHECKING:
    from torch import Tensor

_DOWNLOAD_TIMEOUT_S = 60.0


def weights_dir(home: str | os.PathLike[str] | None = None) -> Path:
    """Where downloaded weight files are kept: ``<bgbias home>/weights``."""
    return (bgbias_home() if home is None else Path(home).expanduser()) / "weights"


def read_state_file(path: str | os.PathLike[str], *, fix: str) -> dict[str, Tensor]:
    """Load a state dict with ``torch.load(weights_only=True)``; any failure is an AssetError with ``fix``."""
    path = Path(path)
    if not path.is_file():
        raise AssetError("weight file not found", path=path, fix=fix)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # damaged or foreign files fail with many exception types
        raise AssetError(f"cannot read the weight file: {err}", path=path, fix=fix) from err
    if not isinstance(state, Mapping) or not all(isinstance(value, torch.Tensor) for value in state.values()):
        raise AssetError("the file is not a state dict (a mapping from names to tensors)", path=path, fix=fix)
    return dict(state)


def fit_state(
    model_state: Mapping[str, Tensor],
    file_state: Mapping[str, Any],
    *,
    source_key: Callable[[str], str] = lambda key: key,
    unused: Callable[[str], bool] = lambda key: False,
    path: str | os.PathLike[str] | None,
    fix: str,
) -> dict[str, Any]:
    """The tensors of ``file_state`` for the keys of ``model_state`` (``source_key`` maps a model key to its
    name in the file; ``unused`` keys are skipped on both sides). ``num_batches_tracked`` may be absent (files
    from before PyTorch 0.4.1). Any other key or shape that does not fit is an AssetError naming it."""
    fitted: dict[str, Any] = {}
    taken: set[str] = set()
    for key, tensor in model_state.items():
        if unused(key):
            continue
        source = source_key(key)
        if source not in file_state:
            if key.endswith(".num_batches_tracked"):
                continue
            raise AssetError(f"the weight file lacks {source!r}", path=path, fix=fix)
        given = file_state[source]
        if tuple(given.shape) != tuple(tensor.shape):
            raise AssetError(
                f"{source!r} in the weight file has shape {tuple(given.shape)}, "
                f"the model needs {tuple(tensor.shape)}",
                path=path,
                fix=fix,
            )
        fitted[key] = given
        taken.add(source)
    extra = [key for key in file_state if key not in taken and not unused(key)]
    if extra:
        raise AssetError(
            f"the weight file holds {extra[0]!r}, which this model does not have "
            f"({len(extra)} such key{'s' if len(extra) > 1 else ''})",
            path=path,
            fix=fix,
        )
    return fitted


def load_state_file(
    model: torch.nn.Module,
    path: str | os.PathLike[str],
    *,
    fix: str,
    source_key: Callable[[str], str] = lambda key: key,
    unused: Callable[[str], bool] = lambda key: False,
) -> None:
    """Load the state dict file at ``path`` into ``model``, every key fitted (:func:`fit_state`; an absent
    ``num_batches_tracked`` keeps its value)."""
    state = read_state_file(path, fix=fix)
    fitted = fit_state(model.state_dict(), state, source_key=source_key, unused=unused, path=path, fix=fix)
    model.load_state_dict(fitted, strict=False)


def download_file(url: str, dest: str | os.PathLike[str]) -> Path:
    """Download ``url`` to ``dest`` (written atomically); network errors propagate to the caller."""
    dest = Path(dest)
    with (
        urllib.request.urlopen(url, timeout=_DOWNLOAD_TIMEOUT_S) as response,
        atomic_path(dest) as tmp,
        open(tmp, "wb") as out,
    ):
        shutil.copyfileobj(response, out, 1 << 20)
    return dest


def torchvision_state(weights: Any) -> Mapping[str, Any]:
    """torchvision's state dict for a weights enum member: from torch hub's cache, else downloaded there."""
    return weights.get_state_dict(progress=True)
