"""BGAugment: sampled on the CPU, applied on the device; composite where drawn, the image elsewhere."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bgbias.bgaugment.background_bank import BackgroundBank
from bgbias.bgaugment.bgaugment import BGAugment, apply_bgaugment, sample_bgaugment
from bgbias.bgaugment.composite import composite
from bgbias.errors import OptionError

SIDE = 12


@pytest.fixture
def bank(backgrounds) -> BackgroundBank:
    return BackgroundBank.from_folder(backgrounds / "train", "cpu")


def batch(n: int = 8, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, 3, SIDE, SIDE), dtype=torch.uint8, generator=generator)
    masks = torch.randint(0, 256, (n, 1, SIDE, SIDE), dtype=torch.uint8, generator=generator)
    return images, masks


def expected(bank, images, masks, p, seed):
    """What BGAugment must return, rebuilt from the same draws."""
    params = sample_bgaugment(bank.sizes, images.shape[0], p, np.random.default_rng(seed))
    x = images.float() / 255
    mixed = composite(x, masks.float() / 255, bank.render(params.crops, SIDE))
    rows = [mixed[i] if params.apply[i] else x[i] for i in range(images.shape[0])]
    return torch.stack(rows), params


def test_p_zero_returns_the_images_scaled_exactly(bank):
    images, masks = batch()
    out = BGAugment(bank, p=0.0)(images, masks, np.random.default_rng(0))
    assert out.dtype == torch.float32
    assert torch.equal(out, images.float() / 255)


def test_p_one_composites_every_image(bank):
    images, masks = batch()
    out = BGAugment(bank, p=1.0)(images, masks, np.random.default_rng(4))
    want, params = expected(bank, images, masks, 1.0, 4)
    assert all(params.apply)
    assert torch.allclose(out, want, atol=1e-6)
    assert not torch.allclose(out, images.float() / 255)


def test_mixed_p_composites_only_the_drawn_images(bank):
    images, masks = batch(16)
    out = BGAugment(bank, p=0.5)(images, masks, np.random.default_rng(9))
    want, params = expected(bank, images, masks, 0.5, 9)
    assert 0 < sum(params.apply) < 16
    assert torch.allclose(out, want, atol=1e-6)
    for i, applied in enumerate(params.apply):
        assert torch.equal(out[i], images[i].float() / 255) != applied


def test_full_mask_keeps_the_image_and_empty_mask_shows_the_background(bank):
    images, _ = batch(2)
    params = sample_bgaugment(bank.sizes, 2, 1.0, np.random.default_rng(1))
    backgrounds = bank.render(params.crops, SIDE)
    x = images.float() / 255
    ones, zeros = torch.ones(2, 1, SIDE, SIDE), torch.zeros(2, 1, SIDE, SIDE)
    apply = torch.tensor([True, True])
    assert torch.equal(apply_bgaugment(x, ones, backgrounds, apply), x)
    assert torch.equal(apply_bgaugment(x, zeros, backgrounds, apply), backgrounds)
    assert torch.equal(apply_bgaugment(x, zeros, backgrounds, torch.tensor([False, True]))[0], x[0])


def test_sampling_is_reproducible_and_crops_fit(bank):
    first = sample_bgaugment(bank.sizes, 20, 0.3, np.random.default_rng(5))
    again = sample_bgaugment(bank.sizes, 20, 0.3, np.random.default_rng(5))
    assert first == again
    assert len(first.crops) == len(first.apply) == 20
    assert all(crop.box.fits(bank.sizes[crop.background]) for crop in first.crops)


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_a_probability_outside_zero_one_is_refused(bank, p):
    with pytest.raises(OptionError, match="probability"):
        BGAugment(bank, p=p)
    with pytest.raises(OptionError, match="probability"):
        sample_bgaugment(bank.sizes, 4, p, np.random.default_rng(0))


def test_wrong_batches_are_refused(bank):
    images, masks = batch()
    augment = BGAugment(bank)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="uint8 or float"):
        augment(images.long(), masks, rng)
    with pytest.raises(ValueError, match="uint8 or float"):
        augment(images, masks[:4], rng)
    with pytest.raises(ValueError, match="uint8 or float"):
        augment(images, masks[:, 0], rng)
    with pytest.raises(ValueError, match="apply"):
        apply_bgaugment(images.float(), masks.float(), images.float(), torch.ones(3, dtype=torch.bool))


def test_float_batches_in_zero_one_give_what_uint8_batches_give(bank):
    images, masks = batch()
    from_uint8 = BGAugment(bank, p=0.5)(images, masks, np.random.default_rng(3))
    from_float = BGAugment(bank, p=0.5)(images.float() / 255, masks.float() / 255, np.random.default_rng(3))
    assert torch.allclose(from_float, from_uint8, atol=1e-6)


def test_a_folder_and_a_seed_make_a_drop_in_with_its_own_draws(backgrounds):
    images, masks = batch()
    first, again = BGAugment(backgrounds, seed=7), BGAugment(backgrounds, seed=7)
    step1, step2 = first(images, masks), first(images, masks)
    assert torch.equal(again(images, masks), step1)  # same seed, same batches: same composites
    assert not torch.equal(step1, step2)  # the generator moves on from call to call
    other = BGAugment(backgrounds, seed=8)(images, masks)
    assert not torch.equal(other, step1)
    # The folder's train/ pool at the training size, as the engine's BGAugment uses it.
    assert first.bank.names == BackgroundBank.from_folder(backgrounds / "train", "cpu").names
    assert min(first.bank.sizes[0]) == 256


def test_a_bank_already_on_the_images_device_is_not_copied(bank):
    assert bank.to("cpu") is bank


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_result_stays_on_the_device_and_matches_cpu(backgrounds, bank):
    on_cuda = BackgroundBank.from_folder(backgrounds / "train", "cuda")
    images, masks = batch()
    out = BGAugment(on_cuda)(images.cuda(), masks.cuda(), np.random.default_rng(2))
    assert out.device.type == "cuda"
    reference = BGAugment(bank)(images, masks, np.random.default_rng(2))
    assert (out.cpu() - reference).abs().max() <= 1.0 / 255 + 1e-6
    follows = BGAugment(bank)  # a CPU bank follows the images to their device
    assert follows(images.cuda(), masks.cuda(), np.random.default_rng(2)).device.type == "cuda"
