"""BGAugment's randomness: a CPU torch generator behind the crop rules, and generators keyed by a tuple."""

from __future__ import annotations

import pytest
import torch

from bgbias.bgaugment.background_crops import sample_background_crop
from bgbias.bgaugment.generators import TorchDraws, check_generator, keyed_generator
from bgbias.errors import OptionError

SIZES = [(64, 48), (48, 64), (80, 80), (1000, 10)]


def test_torch_draws_stay_in_numpys_ranges():
    draws = TorchDraws(torch.Generator().manual_seed(0))
    uniforms = [draws.uniform(0.16, 1.0) for _ in range(2000)]
    integers = {draws.integers(2, 5) for _ in range(2000)}
    assert all(0.16 <= u < 1.0 for u in uniforms) and max(uniforms) > 0.95 and min(uniforms) < 0.2
    assert integers == {2, 3, 4}
    assert all(0 <= draws.random() < 1 for _ in range(100))


def test_the_crop_rules_drawn_from_a_torch_generator_fit_and_repeat():
    def crops(seed):
        draws = TorchDraws(torch.Generator().manual_seed(seed))
        return [sample_background_crop(draws, SIZES) for _ in range(300)]

    first = crops(1)
    assert first == crops(1) and first != crops(2)
    assert all(crop.box.fits(SIZES[crop.background]) for crop in first)
    assert {crop.background for crop in first} == set(range(len(SIZES)))
    assert 0.35 < sum(crop.flip for crop in first) / len(first) < 0.65


def test_a_keyed_generator_depends_on_its_key_alone():
    def draw(*key):
        return torch.rand(4, generator=keyed_generator(key)).tolist()

    assert draw(0, 3, 7) == draw(0, 3, 7)
    assert len({tuple(draw(0, 3, step)) for step in range(20)}) == 20
    assert draw(0, 3, 7) != draw(1, 3, 7) != draw(0, 7, 3)


@pytest.mark.cuda
def test_a_device_generator_is_refused_with_the_one_to_pass():
    with pytest.raises(OptionError, match=r"generator= is a torch\.Generator on cuda"):
        check_generator(torch.Generator("cuda"))
