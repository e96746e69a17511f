"""Read images and masks the same way everywhere: fully decoded, EXIF orientation applied (loading and masks
must agree: docs/design.md, *Masks*), 8 bit, every failure an ``ImageError`` that names the file.
"""

from __future__ import annotations

import os
import warnings
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image, ImageOps

from bgbias.data.layout import visible_entries
from bgbias.data.memory import InMemoryImage
from bgbias.errors import ImageError

if TYPE_CHECKING:
    from bgbias.data.items import Item

PIL_DEFAULT_MAX_PIXELS = 89_478_485
"""Pillow's own default for ``Image.MAX_IMAGE_PIXELS`` (1024³ / 4 / 3 pixels)."""

MAX_IMAGE_PIXELS = 2 * PIL_DEFAULT_MAX_PIXELS
"""Largest image (width × height) bgbias decodes, about 13 400 × 13 400: far above any benchmark photo, far
below what would exhaust memory. Larger files are treated as decompression bombs."""

# Pillow checks sizes itself in open(), seek() and load(): its limit is ours, so those checks agree with ours.
Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp"})
"""Suffixes (compared in lower case) taken as images when scanning a folder: dataset classes and pools."""


def image_files(folder: str | os.PathLike[str]) -> list[str]:
    """Names of the visible image files directly in ``folder``, sorted; [] for an unreadable folder. Entries
    that cannot be used are left out and named in a ``SkippedEntriesWarning`` (``visible_entries``)."""
    return visible_entries(folder, "file", IMAGE_SUFFIXES)


SIXTEEN_BIT_GREY_MODES = frozenset({"I;16", "I;16B", "I;16L", "I;16N", "I"})
"""Greyscale modes Pillow uses for 16-bit files ("I": how older Pillow and some TIFF files expose them)."""


def read_image_bytes(path: str | os.PathLike[str]) -> bytes:
    """The whole file, for a caller that hashes an image and then decodes it from these bytes (``data`` of
    ``load_image``/``load_mask``), so the file is read once; ``ImageError`` when it cannot be read."""
    path = Path(path)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise _read_error(path, exc) from exc


def load_image(path: str | os.PathLike[str] | InMemoryImage, data: bytes | None = None) -> Image.Image:
    """An 8-bit RGB image, fully loaded, upright by its EXIF orientation; decoded from ``data``, the file's
    bytes, where the caller has read them already (``path`` then only names it in errors). An alpha channel is
    dropped, the colour under transparent pixels kept: the object masks come from the saliency model.
    """
    return _loaded(path, data, "RGB")


def load_mask(path: str | os.PathLike[str] | InMemoryImage, data: bytes | None = None) -> Image.Image:
    """A greyscale ("L") mask as ``load_image`` loads an image: colour masks become their luminance."""
    return _loaded(path, data, "L")


def load_matching_mask(
    path: Path | InMemoryImage, image_size: tuple[int, int], item: Item, dataset_name: str
) -> Image.Image:
    """The saliency mask at ``path``; it must have the size of ``item``'s image (else an ``ImageError``)."""
    mask = load_mask(path)
    if mask.size != image_size:
        raise ImageError(
            f"mask size {mask.size} differs from the size {image_size} of image {item.id}",
            path=str(path),
            fix=f"make the masks again with `bgbias masks --dataset {dataset_name}` (the image changed after "
            "its mask was made, or the masks folder belongs to another dataset)",
        )
    return mask


def encoded(image: Image.Image, **options: Any) -> bytes:
    """``image`` saved in memory with Pillow's ``options`` (``format=...``): the bytes its file gets."""
    buffer = BytesIO()
    image.save(buffer, **options)
    return buffer.getvalue()


def _loaded(path: str | os.PathLike[str] | InMemoryImage, data: bytes | None, mode: str) -> Image.Image:
    image = _sixteen_bit_to_l(_opened(path, data))
    try:
        if image.mode == "P" and "transparency" in image.info:
            # Going through RGBA resolves the palette's transparency entry instead of warning about it.
            return image.convert("RGBA").convert(mode)
        return image if image.mode == mode else image.convert(mode)
    except ValueError as exc:
        raise ImageError(f"image mode {image.mode!r} cannot be converted to 8-bit RGB or greyscale",
                         path=str(path), fix="convert the file to an 8-bit RGB JPEG or PNG") from exc


def _sixteen_bit_to_l(image: Image.Image) -> Image.Image:
    """Scale 16-bit greyscale to 8 bit by keeping the high byte, as Pillow 13 does for 48-bit RGB PNGs (its
    ``convert("L")`` clips every value above 255 to white)."""
    if image.mode not in SIXTEEN_BIT_GREY_MODES:
        return image
    values = np.asarray(image).astype(np.int64)
    scaled = (np.clip(values, 0, 65535) >> 8).astype(np.uint8)
    return Image.fromarray(scaled, mode="L")


def _opened(path: str | os.PathLike[str] | InMemoryImage, data: bytes | None) -> Image.Image:
    """The image of a file (decoded) or of a dataset's sample (read from it)."""
    if isinstance(path, InMemoryImage):
        image = path.open()
        _check_pixels(path.name, image.size)
        try:  # a sample may be a file the dataset opened (``Image.open``): decoded and turned upright here
            image.load()
            return ImageOps.exif_transpose(image)
        except (OSError, SyntaxError, ValueError, EOFError) as exc:
            raise ImageError(f"the sample's image cannot be decoded ({exc})", path=path.name,
                             fix="check the file the dataset's __getitem__ opens for this index") from exc
    return _decode(Path(path), data)


def _decode(path: Path, data: bytes | None) -> Image.Image:
    """Open ``data`` (else the file), check the size, decode every pixel and apply the EXIF orientation;
    ``ImageError`` on failure."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path if data is None else BytesIO(data)) as opened:
                _check_pixels(path, opened.size)
                opened.load()
                return ImageOps.exif_transpose(opened)
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        raise _read_error(path, exc) from exc
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise _bomb(path, str(exc)) from exc
    except Image.UnidentifiedImageError as exc:
        raise ImageError(
            "not an image, or in a format Pillow cannot read",
            path=path,
            fix="replace it with a valid JPEG or PNG file, or remove it from the dataset",
        ) from exc
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise ImageError(
            f"image file is truncated or corrupt ({exc})",
            path=path,
            fix="re-download or re-extract the file (a copy interrupted half-way is the usual cause), "
            "or remove it from the dataset",
        ) from exc


def _read_error(path: Path, exc: OSError) -> ImageError:
    """The ``ImageError`` for a file that cannot be opened or read."""
    if isinstance(exc, FileNotFoundError):
        return ImageError(
            "image file not found",
            path=path,
            fix="restore the file, or check that the dataset root and its index file belong together",
        )
    if isinstance(exc, IsADirectoryError):
        return ImageError("expected an image file but found a folder", path=path,
                          fix="point at an image file")
    if isinstance(exc, PermissionError):
        return ImageError(
            "image file cannot be read: permission denied",
            path=path,
            fix="make the file readable for this user",
        )
    return ImageError(
        f"image file cannot be read ({exc.strerror or exc})",
        path=path,
        fix="check the disk and the file (copy it again), or remove it from the dataset",
    )


def _check_pixels(path: Path | str, size: tuple[int, int]) -> None:
    """Refuse oversized images from the header alone, before any pixel is decoded."""
    pixels = size[0] * size[1]
    if pixels > MAX_IMAGE_PIXELS:
        raise _bomb(path, f"{size[0]}×{size[1]} = {pixels} pixels, more than the limit of {MAX_IMAGE_PIXELS}")


def _bomb(path: Path | str, detail: str) -> ImageError:
    return ImageError(
        f"image is too large to decode safely (possible decompression bomb): {detail}",
        path=path,
        fix=f"downscale the image below {MAX_IMAGE_PIXELS} pixels, or remove it from the dataset",
    )
