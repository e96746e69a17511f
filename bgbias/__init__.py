"""bgbias: measure how much a deep metric learning model relies on image backgrounds, and train it to rely
less.

The public API (docs/api.md) is importable from here; each name is imported on first use, so importing the
package is cheap (docs/design.md, *Where imports are*). The packages follow the pipeline's stages
(docs/design.md, *Pipeline and layers*).
"""

from __future__ import annotations

import importlib
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any


def _version() -> str:
    """bgbias's version, whose one source is ``pyproject.toml``'s ``[project] version``: read from the
    installed distribution's metadata (a wheel, an sdist or ``pip install -e``), else, for a source checkout
    put on the path without installing it, from the ``pyproject.toml`` beside the package; ``0+unknown``
    where neither exists (a copied package folder)."""
    try:
        return metadata.version("bgbias")
    except metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
        if not pyproject.is_file():
            return "0+unknown"

        return tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"]


_PUBLIC = {
    "BGAugment": "bgbias.bgaugment.bgaugment",
    "MaskedImages": "bgbias.bgaugment.masked_images",
    "ModelInput": "bgbias.models.model_input",
    "U2NetMasks": "bgbias.saliency.on_the_fly",
    "audit": "bgbias.api",
    "compare_evaluations": "bgbias.api",
    "evaluate": "bgbias.api",
    "evaluate_embeddings": "bgbias.api",
    "explain": "bgbias.api",
    "leakage": "bgbias.api",
    "make_corrupted_sets": "bgbias.api",
    "make_masks": "bgbias.api",
    "score": "bgbias.api",
    "score_embeddings": "bgbias.api",
}
"""Each public name and the module that defines it."""

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name == "__version__":  # what every record stores and ``bgbias --version`` prints; read on first
        globals()[name] = _version()  # use, since reading the installed metadata slows every import
        return globals()[name]
    if name not in _PUBLIC:
        raise AttributeError(f"module 'bgbias' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
