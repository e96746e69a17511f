"""BGAugment: sampled on the CPU from a torch generator, applied on the device; composite where drawn, the
image elsewhere; a module, a per-sample transform in DataLoader workers, and its sample/apply halves."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from bgbias.bgaugment.background_bank import BackgroundBank
from bgbias.bgaugment.background_crops import BackgroundCrop
from bgbias.bgaugment.bgaugment import BGAugment, BGAugmentParams, apply_bgaugment, sample_bgaugment
from bgbias.bgaugment.composite import composite
from bgbias.errors import OptionError

SIDE = 12


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


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
    params = sample_bgaugment(bank.sizes, images.shape[0], p, generator(seed))
    x = images.float() / 255
    mixed = composite(x, masks.float() / 255, bank.render(params.crops, SIDE))
    rows = [mixed[i] if params.apply[i] else x[i] for i in range(images.shape[0])]
    return torch.stack(rows), params


def test_p_zero_returns_the_images_scaled_exactly(bank):
    images, masks = batch()
    out = BGAugment(bank, p=0.0)(images, masks, generator=generator(0))
    assert out.dtype == torch.float32
    assert torch.equal(out, images.float() / 255)


def test_p_one_composites_every_image(bank):
    images, masks = batch()
    out = BGAugment(bank, p=1.0)(images, masks, generator=generator(4))
    want, params = expected(bank, images, masks, 1.0, 4)
    assert all(params.apply)
    assert torch.allclose(out, want, atol=1e-6)
    assert not torch.allclose(out, images.float() / 255)


def test_mixed_p_composites_only_the_drawn_images(bank):
    images, masks = batch(16)
    out = BGAugment(bank, p=0.5)(images, masks, generator=generator(9))
    want, params = expected(bank, images, masks, 0.5, 9)
    assert 0 < sum(params.apply) < 16
    assert torch.allclose(out, want, atol=1e-6)
    for i, applied in enumerate(params.apply):
        assert torch.equal(out[i], images[i].float() / 255) != applied


def test_full_mask_keeps_the_image_and_empty_mask_shows_the_background(bank):
    images, _ = batch(2)
    params = sample_bgaugment(bank.sizes, 2, 1.0, generator(1))
    backgrounds = bank.render(params.crops, SIDE)
    x = images.float() / 255
    ones, zeros = torch.ones(2, 1, SIDE, SIDE), torch.zeros(2, 1, SIDE, SIDE)
    apply = torch.tensor([True, True])
    assert torch.equal(apply_bgaugment(x, ones, backgrounds, apply), x)
    assert torch.equal(apply_bgaugment(x, zeros, backgrounds, apply), backgrounds)
    assert torch.equal(apply_bgaugment(x, zeros, backgrounds, torch.tensor([False, True]))[0], x[0])


def test_sampling_is_reproducible_and_crops_fit(bank):
    first = sample_bgaugment(bank.sizes, 20, 0.3, generator(5))
    again = sample_bgaugment(bank.sizes, 20, 0.3, generator(5))
    assert first == again
    assert len(first.crops) == len(first.apply) == 20
    assert all(crop.box.fits(bank.sizes[crop.background]) for crop in first.crops)


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_a_probability_outside_zero_one_is_refused(bank, p):
    with pytest.raises(OptionError, match="probability"):
        BGAugment(bank, p=p)
    with pytest.raises(OptionError, match="probability"):
        sample_bgaugment(bank.sizes, 4, p, generator(0))


def test_wrong_batches_are_refused(bank):
    images, masks = batch()
    augment = BGAugment(bank)
    with pytest.raises(ValueError, match="uint8 or float"):
        augment(images.long(), masks)
    with pytest.raises(ValueError, match="uint8 or float"):
        augment(images, masks[:4])
    with pytest.raises(ValueError, match="uint8 or float"):
        augment(images, masks[:, 0])
    with pytest.raises(ValueError, match="uint8 or float"):
        augment(images[0], masks)  # one image with a batch of masks
    with pytest.raises(ValueError, match="apply"):
        apply_bgaugment(images.float(), masks.float(), images.float(), torch.ones(3, dtype=torch.bool))


def test_float_batches_in_zero_one_give_what_uint8_batches_give(bank):
    images, masks = batch()
    from_uint8 = BGAugment(bank, p=0.5)(images, masks, generator=generator(3))
    from_float = BGAugment(bank, p=0.5)(images.float() / 255, masks.float() / 255, generator=generator(3))
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


def test_a_seed_and_a_generator_seeded_alike_draw_alike(bank):
    images, masks = batch()
    shared = generator(5)
    by_generator = BGAugment(bank, generator=shared)(images, masks)
    assert torch.equal(BGAugment(bank, seed=5)(images, masks), by_generator)
    assert not torch.equal(shared.get_state(), generator(5).get_state())  # it drew from the caller's
    assert torch.equal(BGAugment(bank)(images, masks), BGAugment(bank, seed=0)(images, masks))  # seed 0


def test_arguments_are_refused_with_their_python_names(bank):
    refusals = [
        (lambda: BGAugment(bank, seed=1, generator=generator(1)), "seed=1 and generator= were both given"),
        (lambda: BGAugment(bank, generator=3), "generator=3 is invalid: it must be a torch.Generator on the"),
        (lambda: BGAugment(bank).sample(4, generator=np.random.default_rng(0)),
         r"generator=Generator\(PCG64\).* is invalid"),
        (lambda: sample_bgaugment(bank.sizes, 4, 1.0, "0"), "generator='0' is invalid"),
        (lambda: BGAugment(bank).sample(0), "batch_size=0 is invalid"),
        (lambda: BGAugment(bank, p=2), "p=2 is invalid"),
    ]
    for call, message in refusals:
        with pytest.raises(OptionError, match=message):
            call()


def test_it_is_a_module_whose_backgrounds_move_with_it_and_stay_out_of_its_state(bank):
    augment = BGAugment(bank, p=0.5)
    assert isinstance(augment, torch.nn.Module)
    assert augment.state_dict() == {}  # the pool is a buffer, not a weight a checkpoint should carry
    assert torch.equal(augment.bank.pixels, bank.pixels) and augment.bank.names == bank.names
    assert augment.to("cpu") is augment and augment.bank.device.type == "cpu"
    assert repr(augment) == "BGAugment(p=0.5, backgrounds=4)"


def test_forward_is_apply_of_sample_and_the_draws_are_plain_data(bank):
    images, masks = batch()
    augment = BGAugment(bank, p=0.5)
    params = augment.sample(8, generator=generator(3))
    assert isinstance(params, BGAugmentParams)
    assert params == sample_bgaugment(bank.sizes, 8, 0.5, generator(3))
    assert all(isinstance(crop, BackgroundCrop) for crop in params.crops)
    assert all(isinstance(flag, bool) for flag in params.apply)
    assert torch.equal(augment.apply(images, masks, params), augment(images, masks, generator=generator(3)))
    # Replayed draws put the same backgrounds behind other images: with empty masks, only they show.
    empty = torch.zeros_like(masks)
    assert torch.equal(augment.apply(images, empty, params)[params.apply],
                       augment.apply(images.flip(-1), empty, params)[params.apply])
    with pytest.raises(ValueError, match=r"params= holds draws for 8 images, images= has 4"):
        augment.apply(images[:4], masks[:4], params)


def test_one_image_is_composited_as_a_batch_of_one(bank):
    images, masks = batch(1)
    augment = BGAugment(bank)
    single = augment(images[0], masks[0], generator=generator(6))
    assert single.shape == (3, SIDE, SIDE) and single.dtype == torch.float32
    assert torch.equal(single, augment(images, masks, generator=generator(6))[0])


class BackgroundsOnly(Dataset):
    """Grey images with empty masks through a BGAugment: each sample is the background it drew."""

    def __init__(self, augment: BGAugment, size: int):
        self.augment, self.size = augment, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> torch.Tensor:
        image = torch.full((3, SIDE, SIDE), 128, dtype=torch.uint8)
        return self.augment(image, torch.zeros((1, SIDE, SIDE), dtype=torch.uint8))


def loaded(dataset: Dataset, seed: int) -> torch.Tensor:
    """Every sample through two workers (sample 2k from worker 0, 2k + 1 from worker 1), the workers' seeds
    drawn from a loader generator seeded by ``seed``."""
    return torch.cat(list(DataLoader(dataset, batch_size=1, num_workers=2, generator=generator(seed))))


@pytest.mark.slow
def test_dataloader_workers_draw_streams_of_their_own_reproducibly(bank):
    dataset = BackgroundsOnly(BGAugment(bank, seed=0), 6)
    first = loaded(dataset, 0)
    # Copies of one generator would give both workers the same draws: sample 0 would be sample 1's.
    assert not any(torch.equal(first[2 * k], first[2 * k + 1]) for k in range(3))
    assert torch.equal(loaded(dataset, 0), first)  # the same loader seed: the same composites
    assert not torch.equal(loaded(dataset, 1), first)  # another epoch (another worker seed): new draws
    assert not torch.equal(loaded(BackgroundsOnly(BGAugment(bank, seed=1), 6), 0), first)
    assert torch.equal(dataset.augment.generator.get_state(), generator(0).get_state())  # main's unused


@pytest.mark.cuda
def test_on_cuda_the_result_stays_on_the_device_and_matches_cpu(backgrounds, bank):
    on_cuda = BackgroundBank.from_folder(backgrounds / "train", "cuda")
    images, masks = batch()
    out = BGAugment(on_cuda)(images.cuda(), masks.cuda(), generator=generator(2))
    assert out.device.type == "cuda"
    reference = BGAugment(bank)(images, masks, generator=generator(2))
    assert (out.cpu() - reference).abs().max() <= 1.0 / 255 + 1e-6
    follows = BGAugment(bank)  # a CPU bank follows the images to their device
    assert follows(images.cuda(), masks.cuda(), generator=generator(2)).device.type == "cuda"


@pytest.mark.cuda
def test_the_module_moved_to_cuda_composites_there_what_it_composites_on_the_cpu(bank):
    images, masks = batch()
    on_cpu, on_cuda = BGAugment(bank, p=0.5, seed=3), BGAugment(bank, p=0.5, seed=3).to("cuda")
    assert on_cuda.background_pixels.device.type == "cuda" and bank.device.type == "cpu"
    out = on_cuda(images.cuda(), masks.cuda())
    assert out.device.type == "cuda"
    assert torch.allclose(out.cpu(), on_cpu(images, masks), atol=1.0 / 255 + 1e-6)
    params = on_cuda.sample(8, generator=generator(1))  # drawn on the CPU, applied on the device
    replayed = on_cuda.apply(images.cuda(), masks.cuda(), params)
    assert torch.allclose(replayed.cpu(), on_cpu.apply(images, masks, params), atol=1.0 / 255 + 1e-6)
