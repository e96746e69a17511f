"""Reading a manifest's JSON strictly: every field has the type and range its writer gives it, never coerced.

The corrupted-set manifests (:mod:`bgbias.corrupted.manifests`) and the profile's variant manifests
(:mod:`bgbias.variants.variant_manifests`) are read with these, so a manifest edited by hand or damaged names
its bad field instead of silently giving other images: ``"no"`` is not a flip, ``"3"`` not a seed, a key given
twice is refused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bgbias.assets.digest import is_sha256
from bgbias.errors import AssetError
from bgbias.schema import unique_keys

DAMAGED = "make the manifest again with bgbias corrupt (a manifest is never edited by hand)"


def read_json(path: Path) -> tuple[Any, str]:
    """The parsed file and the sha256 of the very bytes parsed; a key given twice in one object is refused."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise AssetError("corrupted-set manifest not found", path=path,
                         fix="make it with: bgbias corrupt --dataset NAME") from None
    except OSError as exc:
        raise AssetError(f"corrupted-set manifest cannot be read ({exc})", path=path, fix=DAMAGED) from exc
    try:
        data = json.loads(raw.decode("utf-8"), object_pairs_hook=unique_keys)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise AssetError(f"corrupted-set manifest cannot be read ({exc})", path=path, fix=DAMAGED) from exc
    return data, hashlib.sha256(raw).hexdigest()


def check_keys(raw: Any, keys: Sequence[str], where: str, path: Path) -> dict[str, Any]:
    """``raw`` must be a JSON object with exactly ``keys``."""
    if not isinstance(raw, dict):
        raise bad_field(where, "an object", raw, path)
    missing = [key for key in keys if key not in raw]
    unknown = sorted(set(raw) - set(keys))
    if missing or unknown:
        parts = [f"lacks {', '.join(missing)}" if missing else "", f"has unknown {', '.join(unknown)}"
                 if unknown else ""]
        raise AssetError(f"{where} {' and '.join(p for p in parts if p)}", path=path, fix=DAMAGED)
    return raw


def is_int(value: Any) -> bool:
    """A JSON integer: Python's ``bool`` is an ``int`` too, but ``true`` is not a number."""
    return isinstance(value, int) and not isinstance(value, bool)


def int_field(value: Any, where: str, path: Path, low: int = 0, high: int | None = None) -> int:
    if not is_int(value) or value < low or (high is not None and value > high):
        wanted = f"an integer in {low}..{high}" if high is not None else f"an integer >= {low}"
        raise bad_field(where, wanted, value, path)
    return value


def text_field(value: Any, where: str, path: Path, allowed: Sequence[str] | None = None) -> str:
    if allowed is not None and value not in allowed:
        raise bad_field(where, f"one of {', '.join(allowed)}", value, path)
    if not isinstance(value, str) or not value:
        raise bad_field(where, "a non-empty string", value, path)
    return value


def sha256_field(value: Any, where: str, path: Path) -> str:
    if not is_sha256(value):
        raise bad_field(where, "a sha256 (64 lower-case hex digits)", value, path)
    return value


def canonical(value: Any) -> str:
    """JSON text that tells ``1``, ``1.0`` and ``true`` apart, for comparing recorded values exactly."""
    return json.dumps(value, sort_keys=True)


def bad_field(where: str, wanted: str, value: Any, path: Path) -> AssetError:
    shown = json.dumps(value, ensure_ascii=False)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return AssetError(f"manifest field {where} must be {wanted}, got {shown}", path=path, fix=DAMAGED)
