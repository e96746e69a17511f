"""Image and mask loading: every mode ends as 8-bit RGB or L, upright; every bad file is an ImageError."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from PIL import Image

from bgbias.data import images
from bgbias.data.images import load_image, load_mask, read_image_bytes
from bgbias.data.memory import InMemoryImage
from bgbias.errors import ImageError

EXIF_ORIENTATION = 0x0112


def stripes(size=(32, 24)) -> Image.Image:
    """Top half red, bottom half blue: shows where the top of the picture went after a rotation."""
    array = np.zeros((size[1], size[0], 3), np.uint8)
    array[: size[1] // 2, :, 0] = 255
    array[size[1] // 2 :, :, 2] = 255
    return Image.fromarray(array)


def noise_jpeg(path, size=(64, 48)) -> bytes:
    array = np.random.default_rng(0).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(array).save(path, quality=95)
    return path.read_bytes()


def test_rgb_jpeg_is_loaded_fully(tmp_path):
    path = tmp_path / "a.jpg"
    stripes().save(path, quality=95)
    image = load_image(path)
    assert image.mode == "RGB" and image.size == (32, 24)
    red, blue = image.getpixel((16, 2)), image.getpixel((16, 21))
    assert red[0] > 200 and red[2] < 60 and blue[2] > 200 and blue[0] < 60


def test_exif_orientation_is_applied(tmp_path):
    path = tmp_path / "rotated.jpg"
    exif = Image.Exif()
    exif[EXIF_ORIENTATION] = 6  # stored picture must be turned 90° clockwise to be upright
    stripes().save(path, exif=exif, quality=95)
    image = load_image(path)
    assert image.size == (24, 32)
    # The stored top (red) ends on the right, the stored bottom (blue) on the left.
    right, left = image.getpixel((21, 16)), image.getpixel((2, 16))
    assert right[0] > 200 and right[2] < 60
    assert left[2] > 200 and left[0] < 60


def test_exif_orientation_is_applied_to_masks(tmp_path):
    path = tmp_path / "mask.png"
    exif = Image.Exif()
    exif[EXIF_ORIENTATION] = 6
    Image.new("L", (32, 24), 255).save(path, exif=exif)
    assert load_mask(path).size == (24, 32)


def test_missing_file(tmp_path):
    path = tmp_path / "nope.jpg"
    with pytest.raises(ImageError, match="not found") as info:
        load_image(path)
    assert info.value.path == str(path) and info.value.fix


def test_folder_instead_of_file(tmp_path):
    with pytest.raises(ImageError, match="folder"):
        load_image(tmp_path)
    with pytest.raises(ImageError, match="folder"):
        read_image_bytes(tmp_path)


def test_bytes_read_once_decode_like_the_file_and_errors_name_the_path(tmp_path):
    path = tmp_path / "stripes.png"
    stripes().save(path)
    data = read_image_bytes(path)
    path.unlink()  # decoding from the bytes must not read the file again
    assert np.array_equal(np.asarray(load_image(path, data)), np.asarray(stripes()))
    assert load_mask(path, data).mode == "L"
    with pytest.raises(ImageError, match="not found") as info:
        read_image_bytes(path)
    assert info.value.path == str(path)
    with pytest.raises(ImageError, match="not an image") as info:
        load_image(path, b"these are not pixels")
    assert info.value.path == str(path)


def test_text_file_named_jpg(tmp_path):
    path = tmp_path / "notes.jpg"
    path.write_text("these are not pixels\n")
    with pytest.raises(ImageError, match="not an image") as info:
        load_image(path)
    assert str(path) in str(info.value) and "fix" in str(info.value)


def test_truncated_jpeg(tmp_path):
    path = tmp_path / "cut.jpg"
    data = noise_jpeg(path)
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageError, match="truncated") as info:
        load_image(path)
    assert info.value.path == str(path)


def test_truncated_png(tmp_path):
    path = tmp_path / "cut.png"
    array = np.random.default_rng(1).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    Image.fromarray(array).save(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageError, match="truncated or corrupt"):
        load_image(path)


def test_image_over_our_pixel_limit(tmp_path, monkeypatch):
    path = tmp_path / "big.png"
    Image.new("RGB", (32, 24)).save(path)
    monkeypatch.setattr(images, "MAX_IMAGE_PIXELS", 32 * 24 - 1)
    with pytest.raises(ImageError, match="decompression bomb"):
        load_image(path)
    with pytest.raises(ImageError, match="decompression bomb"):
        load_mask(path)


@pytest.mark.parametrize("pil_limit", [500, 300], ids=["pillow-warning", "pillow-error"])
def test_pillow_bomb_warning_and_error_become_image_errors(tmp_path, monkeypatch, pil_limit):
    # 768 pixels: above 500 only Pillow's warning fires, above 2 × 300 its error does.
    path = tmp_path / "big.png"
    Image.new("RGB", (32, 24)).save(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", pil_limit)
    with pytest.raises(ImageError, match="decompression bomb"):
        load_image(path)


def test_pillow_limit_is_set_to_ours():
    assert Image.MAX_IMAGE_PIXELS == images.MAX_IMAGE_PIXELS == 2 * images.PIL_DEFAULT_MAX_PIXELS


def test_cmyk_jpeg(tmp_path):
    path = tmp_path / "cmyk.jpg"
    Image.new("CMYK", (32, 24), (0, 255, 255, 0)).save(path, quality=95)
    image = load_image(path)
    assert image.mode == "RGB"
    red = image.getpixel((16, 12))
    assert red[0] > 240 and red[1] < 15 and red[2] < 15


def test_sixteen_bit_grey_png_is_scaled_not_clipped(tmp_path):
    import cv2

    path = tmp_path / "grey16.png"
    values = np.array([[0, 255, 256, 40000, 65535]], dtype=np.uint16)
    assert cv2.imwrite(str(path), values)
    assert Image.open(path).mode.startswith("I;16")
    expected = (values >> 8).astype(np.uint8)  # [0, 0, 1, 156, 255]
    mask = load_mask(path)
    assert mask.mode == "L"
    np.testing.assert_array_equal(np.asarray(mask), expected)
    rgb = np.asarray(load_image(path))
    for channel in range(3):
        np.testing.assert_array_equal(rgb[..., channel], expected)


def test_sixteen_bit_rgb_png_is_scaled_not_clipped(tmp_path):
    import cv2

    path = tmp_path / "rgb48.png"
    rgb = np.array([[[65535, 1000, 40000], [300, 0, 65535]]], dtype=np.uint16)
    assert cv2.imwrite(str(path), rgb[..., ::-1])  # cv2 writes BGR
    image = load_image(path)
    assert image.mode == "RGB"
    # Pillow 13 opens 48-bit PNGs as "RGB;16B" and keeps the high byte: scaled, not clipped to 255.
    np.testing.assert_array_equal(np.asarray(image), (rgb >> 8).astype(np.uint8))


@pytest.mark.parametrize("mode", ["I;16", "I;16B", "I;16L"])
def test_every_sixteen_bit_grey_mode_is_scaled_to_eight_bit_rgb(mode):
    values = np.array([[0, 511, 40000, 65535]], dtype=">u2" if mode == "I;16B" else "<u2")
    image = Image.frombytes(mode, (4, 1), values.tobytes())
    loaded = load_image(InMemoryImage([image], 0, None, "dataset[0]"))
    np.testing.assert_array_equal(np.asarray(loaded)[0, :, 0], [0, 1, 156, 255])


def test_thirty_two_bit_integer_grey_is_read_as_sixteen_bit(tmp_path):
    path = tmp_path / "grey32.tif"
    Image.fromarray(np.array([[0, 40000, 70000, -5]], dtype=np.int32)).save(path)
    assert Image.open(path).mode == "I"
    np.testing.assert_array_equal(np.asarray(load_mask(path)), [[0, 156, 255, 0]])


def test_palette_png_with_transparency(tmp_path):
    path = tmp_path / "palette.png"
    image = Image.new("P", (4, 2), 0)
    image.putpalette([10, 20, 30, 200, 100, 50] + [0] * 762)
    image.putpixel((3, 1), 1)
    image.info["transparency"] = 0
    image.save(path, transparency=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = load_image(path)
    assert loaded.mode == "RGB"
    assert loaded.getpixel((0, 0)) == (10, 20, 30)  # transparent entry keeps its colour: alpha is dropped
    assert loaded.getpixel((3, 1)) == (200, 100, 50)


@pytest.mark.parametrize(
    ("mode", "pixel", "expected"),
    [("RGBA", (10, 20, 30, 0), (10, 20, 30)), ("LA", (77, 0), (77, 77, 77)), ("L", 90, (90, 90, 90))],
)
def test_alpha_dropped_and_grey_expanded(tmp_path, mode, pixel, expected):
    path = tmp_path / "image.png"
    Image.new(mode, (4, 4), pixel).save(path)
    loaded = load_image(path)
    assert loaded.mode == "RGB" and loaded.getpixel((1, 1)) == expected


def test_colour_mask_becomes_luminance(tmp_path):
    path = tmp_path / "mask.png"
    Image.new("RGB", (4, 4), (255, 255, 255)).save(path)
    mask = load_mask(path)
    assert mask.mode == "L" and mask.getpixel((0, 0)) == 255


def test_bilevel_mask(tmp_path):
    path = tmp_path / "mask.png"
    Image.new("1", (4, 4), 1).save(path)
    assert np.asarray(load_mask(path)).min() == 255


def test_mode_without_conversion(tmp_path):
    path = tmp_path / "lab.tif"
    Image.new("LAB", (4, 4)).save(path)
    with pytest.raises(ImageError, match="cannot be converted"):
        load_mask(path)
