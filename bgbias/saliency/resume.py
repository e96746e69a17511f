"""What is left to do in a mask folder: which images belong to this shard, and which finished masks are
intact."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PIL import Image

from bgbias.data.items import Item
from bgbias.errors import OptionError


def check_shard(shard: tuple[int, int]) -> None:
    index, count = shard
    if count < 1 or not 0 <= index < count:
        raise OptionError(
            f"shard {index} of {count} does not exist",
            fix="give the shard as (index, count) with 0 <= index < count, e.g. 0 of 4 … 3 of 4",
        )


def shard_items(items: Sequence[Item], shard: tuple[int, int]) -> list[Item]:
    """Shard ``index`` of ``count``: every ``count``-th image of the id-sorted list, from ``index``."""
    check_shard(shard)
    index, count = shard
    return sorted(items, key=lambda item: item.id)[index::count]


def mask_is_intact(path: Path, size: tuple[int, int] | None) -> bool:
    """A mask counts as finished only if it decodes completely as an 8-bit greyscale image of ``size``."""
    if size is None:
        return False
    try:
        with Image.open(path) as mask:
            if mask.mode != "L" or mask.size != tuple(size):
                return False
            mask.load()
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        return False
    return True
