"""Views: parameters within their presets, and the returned alpha is exactly the compositing weight."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bgbias.bench.views import VIEW_PRESETS, ViewParams, render_view, sample_view_params

SIZE = 64


def _stamp() -> np.ndarray:
    """A 90×60 object with a soft edge, inside a larger transparent canvas."""
    rgba = np.zeros((80, 120, 4), dtype=np.uint8)
    yy, xx = np.mgrid[0:60, 0:90]
    radius = ((xx - 45) / 44) ** 2 + ((yy - 30) / 29) ** 2
    rgba[10:70, 15:105, 3] = (np.clip((1 - radius) * 6, 0, 1) * 255).astype(np.uint8)
    rgba[10:70, 15:105, 0] = (xx * 2).astype(np.uint8)
    rgba[10:70, 15:105, 1] = 200
    rgba[10:70, 15:105, 2] = (yy * 3).astype(np.uint8)
    return rgba


@pytest.mark.parametrize("preset", sorted(VIEW_PRESETS))
def test_sampled_params_stay_in_their_ranges(preset: str) -> None:
    ranges = VIEW_PRESETS[preset]
    rng = np.random.default_rng(0)
    samples = [sample_view_params(rng, preset) for _ in range(300)]
    for p in samples:
        left, top, right, bottom = p.window
        assert 0 <= left < right <= 1 and 0 <= top < bottom <= 1
        assert right - left >= ranges.window_min - 1e-4 and bottom - top >= ranges.window_min - 1e-4
        assert ranges.scale[0] <= p.scale <= ranges.scale[1]
        assert abs(p.rotation_deg) <= ranges.rotation_deg
        assert max(abs(v) for v in p.perspective) <= ranges.perspective
        for factor in (p.brightness, p.contrast, p.saturation):
            assert abs(factor - 1) <= ranges.jitter + 1e-4
    blurred = sum(p.blur_sigma > 0 for p in samples) / len(samples)
    assert blurred == pytest.approx(ranges.blur_p, abs=0.08)
    if preset == "mild":
        assert all(p.window == (0.0, 0.0, 1.0, 1.0) and p.blur_sigma == 0 for p in samples)
    else:
        assert min(p.window[2] - p.window[0] for p in samples) < 0.7


def test_same_rng_state_same_params() -> None:
    one = sample_view_params(np.random.default_rng(9), "hard")
    two = sample_view_params(np.random.default_rng(9), "hard")
    assert one == two


@pytest.mark.parametrize("seed", range(6))
def test_alpha_is_exactly_the_compositing_weight(seed: int) -> None:
    params = sample_view_params(np.random.default_rng(seed), "hard")
    black = np.zeros((SIZE, SIZE, 3), dtype=np.uint8)
    white = np.full((SIZE, SIZE, 3), 255, dtype=np.uint8)
    on_black, alpha = render_view(_stamp(), black, params, SIZE)
    on_white, alpha_again = render_view(_stamp(), white, params, SIZE)
    np.testing.assert_array_equal(alpha, alpha_again)
    assert alpha.dtype == np.uint8 and alpha.shape == (SIZE, SIZE)
    assert 0 < (alpha > 0).mean() < 1
    # on_white − on_black = (1 − α)·255 wherever the object's colour is the same in both: every pixel.
    difference = on_white.astype(int) - on_black.astype(int)
    expected = 255 - alpha.astype(int)
    assert np.abs(difference - expected[..., None]).max() <= 1
    assert (on_black[alpha == 0] == 0).all() and (on_white[alpha == 0] == 255).all()


def test_background_shows_unchanged_outside_the_object() -> None:
    params = sample_view_params(np.random.default_rng(1), "mild")
    background = np.random.default_rng(2).integers(0, 256, size=(SIZE, SIZE, 3), dtype=np.uint8)
    rgb, alpha = render_view(_stamp(), background, params, SIZE)
    np.testing.assert_array_equal(rgb[alpha == 0], background[alpha == 0])


def test_object_size_and_window_follow_the_params() -> None:
    base = sample_view_params(np.random.default_rng(3), "mild")
    upright = dataclasses.replace(base, rotation_deg=0.0, position=(0.5, 0.5))
    black = np.zeros((SIZE, SIZE, 3), np.uint8)
    _, small = render_view(_stamp(), black, dataclasses.replace(upright, scale=0.4), SIZE)
    _, large = render_view(_stamp(), black, dataclasses.replace(upright, scale=0.8), SIZE)
    assert (large > 127).sum() == pytest.approx(4 * (small > 127).sum(), rel=0.15)
    half = dataclasses.replace(upright, scale=0.8, window=(0.0, 0.0, 0.5, 1.0))
    _, half_alpha = render_view(_stamp(), black, half, SIZE)
    columns = np.flatnonzero((half_alpha > 127).any(axis=0))
    rows = np.flatnonzero((half_alpha > 127).any(axis=1))
    width, height = columns[-1] - columns[0] + 1, rows[-1] - rows[0] + 1
    assert width / height == pytest.approx(45 / 60, abs=0.1)  # the left half of a 90×60 object
    assert height == pytest.approx(0.8 * SIZE, abs=4)  # its long side is scaled to 0.8 of the view


def test_rendering_is_deterministic() -> None:
    params = sample_view_params(np.random.default_rng(4), "hard")
    background = np.full((SIZE, SIZE, 3), 90, dtype=np.uint8)
    first = render_view(_stamp(), background, params, SIZE)
    second = render_view(_stamp(), background, params, SIZE)
    np.testing.assert_array_equal(first[0], second[0])
    np.testing.assert_array_equal(first[1], second[1])


def test_bad_inputs_are_refused() -> None:
    params = sample_view_params(np.random.default_rng(0), "hard")
    with pytest.raises(ValueError, match="background must be"):
        render_view(_stamp(), np.zeros((10, 10, 3), np.uint8), params, SIZE)
    with pytest.raises(ValueError, match="transparent"):
        render_view(np.zeros((20, 20, 4), np.uint8), np.zeros((SIZE, SIZE, 3), np.uint8), params, SIZE)
    assert isinstance(params, ViewParams)
