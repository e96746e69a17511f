"""BackgroundBank: one padded tensor of the pool, crops rendered as PIL's apply_crop renders them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from bgbias.bgaugment.background_bank import BackgroundBank, render_crops
from bgbias.bgaugment.background_crops import BackgroundCrop, CropBox, apply_crop, sample_background_crop
from bgbias.data.transforms import resized_size
from bgbias.errors import DatasetError, OptionError

SIZES = [(64, 48), (40, 70), (90, 30)]


def sample_crops(bank: BackgroundBank, rng: np.random.Generator, n: int) -> list[BackgroundCrop]:
    """``n`` crops of the bank's backgrounds by the paper's code's rules (what BGAugment draws)."""
    return [sample_background_crop(rng, bank.sizes) for _ in range(n)]


def smooth_picture(width: int, height: int, phase: float) -> np.ndarray:
    ys, xs = np.mgrid[0:height, 0:width]
    channels = [
        127 + 120 * np.sin(xs / 9 + phase),
        127 + 120 * np.cos(ys / 7 - phase),
        127 + 100 * np.sin((xs + ys) / 13),
    ]
    return np.stack(channels, axis=-1).round().astype(np.uint8)


@pytest.fixture
def pool(tmp_path) -> Path:
    folder = tmp_path / "pool"
    folder.mkdir()
    for index, (width, height) in enumerate(SIZES):
        Image.fromarray(smooth_picture(width, height, index)).save(folder / f"bg-{index}.png")
    return folder


def as_hwc(rendered: torch.Tensor) -> np.ndarray:
    return (rendered * 255).permute(0, 2, 3, 1).numpy()


def test_from_folder_stores_one_padded_uint8_tensor(pool):
    bank = BackgroundBank.from_folder(pool, "cpu")
    assert len(bank) == 3
    assert bank.names == ["bg-0.png", "bg-1.png", "bg-2.png"]
    assert bank.sizes == SIZES
    assert bank.pixels.dtype == torch.uint8 and bank.pixels.shape == (3, 3, 70, 90)
    for index, (width, height) in enumerate(SIZES):
        stored = bank.pixels[index].permute(1, 2, 0).numpy()
        assert np.array_equal(stored[:height, :width], np.asarray(Image.open(pool / f"bg-{index}.png")))
        assert not stored[height:].any() and not stored[:, width:].any()


def test_shorter_side_resizes_each_background(pool):
    bank = BackgroundBank.from_folder(pool, "cpu", shorter_side=20)
    assert bank.sizes == [resized_size(size, 20) for size in SIZES]
    with pytest.raises(OptionError, match="positive"):
        BackgroundBank.from_folder(pool, "cpu", shorter_side=0)


def test_an_empty_or_missing_pool_is_a_dataset_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="no images"):
        BackgroundBank.from_folder(tmp_path / "empty", "cpu")
    with pytest.raises(DatasetError, match="not found"):
        BackgroundBank.from_folder(tmp_path / "absent", "cpu")


@pytest.mark.parametrize("size", [16, 48, 100])
def test_render_agrees_with_apply_crop(pool, size):
    bank = BackgroundBank.from_folder(pool, "cpu")
    crops = sample_crops(bank, np.random.default_rng(size), 24)
    rendered = bank.render(crops, size)
    assert rendered.shape == (24, 3, size, size) and rendered.dtype == torch.float32
    assert rendered.min() >= 0 and rendered.max() <= 1
    pictures = [Image.open(pool / name).convert("RGB") for name in bank.names]
    expected = np.stack([apply_crop(pictures[c.background], c.box, c.flip, size) for c in crops])
    assert np.abs(as_hwc(rendered) - expected).mean() < 1.0  # on the 0–255 scale


def test_flip_mirrors_the_render(pool):
    bank = BackgroundBank.from_folder(pool, "cpu")
    box = CropBox(5, 3, 30, 20)
    plain, mirrored = bank.render([BackgroundCrop(0, box, False), BackgroundCrop(0, box, True)], 24)
    assert torch.equal(mirrored, plain.flip(-1))
    assert not torch.equal(mirrored, plain)


def test_render_never_reads_the_padding(pool):
    """A crop at the far corner of a small background is the same whatever fills the padding."""
    bank = BackgroundBank.from_folder(pool, "cpu")
    filled = bank.pixels.clone()
    filled[2, :, 30:, :] = 255  # background 2 is 90×30 in a 90×70 slot
    other = BackgroundBank(filled, bank.sizes, bank.names)
    crops = [
        BackgroundCrop(2, CropBox(60, 10, 30, 20), False),
        BackgroundCrop(1, CropBox(10, 40, 30, 30), True),
    ]
    assert torch.equal(bank.render(crops, 32), other.render(crops, 32))


def test_float_kernel_agrees_with_uint8_kernel(pool):
    """The float path is the one CUDA takes; it must render what the CPU's uint8 path renders."""
    bank = BackgroundBank.from_folder(pool, "cpu")
    crops = sample_crops(bank, np.random.default_rng(0), 12)
    exact = render_crops(bank.pixels, crops, 40, uint8_kernel=True)
    floating = render_crops(bank.pixels, crops, 40, uint8_kernel=False)
    assert (exact - floating).abs().max() <= 1.0


def test_render_dtype_and_bad_crops(pool):
    bank = BackgroundBank.from_folder(pool, "cpu")
    crops = sample_crops(bank, np.random.default_rng(1), 3)
    assert bank.render(crops, 8, torch.float64).dtype == torch.float64
    with pytest.raises(ValueError, match="does not fit"):
        bank.render([BackgroundCrop(1, CropBox(0, 0, 41, 10), False)], 8)
    with pytest.raises(ValueError, match="does not fit"):
        bank.render([BackgroundCrop(3, CropBox(0, 0, 4, 4), False)], 8)


def test_samples_fit_their_backgrounds(pool):
    bank = BackgroundBank.from_folder(pool, "cpu")
    crops = sample_crops(bank, np.random.default_rng(2), 50)
    assert len(crops) == 50
    assert all(crop.box.fits(bank.sizes[crop.background]) for crop in crops)
    assert {crop.background for crop in crops} == {0, 1, 2}


@pytest.mark.cuda
def test_render_on_cuda_matches_cpu(pool):
    cpu = BackgroundBank.from_folder(pool, "cpu")
    cuda = BackgroundBank.from_folder(pool, "cuda")
    crops = sample_crops(cpu, np.random.default_rng(3), 16)
    on_device = cuda.render(crops, 48)
    assert on_device.device.type == "cuda"
    assert (on_device.cpu() - cpu.render(crops, 48)).abs().max() <= 1.0 / 255 + 1e-6
