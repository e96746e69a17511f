"""Generated backgrounds: solid colours, colour gradients and abstract patterns (three of the paper's kinds).
Sampled parameters are plain JSON values, so a manifest records them and any image can be re-rendered from its
entry alone; rendering works on a grid normalised by the long side, so a pattern looks alike at any size.
"""

from __future__ import annotations

import colorsys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

GeneratedKind = Literal["solid", "gradient", "pattern"]

Params = dict[str, Any]
Sampler = Callable[[np.random.Generator], Params]
Renderer = Callable[[Params, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class GeneratedSpec:
    """One generated background: which generator draws it and with which (JSON-ready) parameters."""

    generator: str
    params: Params

    @property
    def kind(self) -> GeneratedKind:
        return GENERATORS[self.generator].kind


@dataclass(frozen=True)
class _Generator:
    kind: GeneratedKind
    sample: Sampler
    render: Renderer  # (params, x, y) -> float RGB in [0, 255], x and y in units of the long side


def sample_generated(rng: np.random.Generator, kind: GeneratedKind) -> GeneratedSpec:
    """Pick one generator of ``kind`` uniformly and sample its parameters."""
    names = sorted(name for name, gen in GENERATORS.items() if gen.kind == kind)
    if not names:
        raise ValueError(f"unknown generated background kind {kind!r}")
    name = names[int(rng.integers(len(names)))]
    return GeneratedSpec(name, GENERATORS[name].sample(rng))


def render_generated(spec: GeneratedSpec, size: tuple[int, int]) -> np.ndarray:
    """Draw ``spec`` as an (height, width, 3) uint8 image; ``size`` is (width, height) as in PIL."""
    width, height = size
    long_side = max(width, height)
    x = ((np.arange(width, dtype=np.float64) + 0.5) / long_side)[None, :]
    y = ((np.arange(height, dtype=np.float64) + 0.5) / long_side)[:, None]
    rgb = GENERATORS[spec.generator].render(spec.params, x, y)
    rgb = np.broadcast_to(rgb, (height, width, 3))
    return np.clip(np.rint(rgb), 0, 255).astype(np.uint8)


# --- sampling helpers ---------------------------------------------------------------------------------------


def _num(value: float) -> float:
    """Round a sampled number so the manifest shows exactly the value the renderer uses."""
    return round(float(value), 4)


def _colour(rng: np.random.Generator) -> list[int]:
    """A random colour drawn in HSV, so greys, pastels, dark and saturated colours all occur."""
    hue, sat, val = rng.uniform(0, 1), rng.uniform(0.0, 1.0) ** 0.7, rng.uniform(0.15, 1.0)
    return [round(c * 255) for c in colorsys.hsv_to_rgb(hue, sat, val)]


def _colours(rng: np.random.Generator, low: int, high: int) -> list[list[int]]:
    return [_colour(rng) for _ in range(int(rng.integers(low, high + 1)))]


def _angle(rng: np.random.Generator) -> float:
    return _num(rng.uniform(0, 180))


# --- rendering helpers --------------------------------------------------------------------------------------


def _ramp(t: np.ndarray, colours: list[list[int]]) -> np.ndarray:
    """Map ``t`` in [0, 1] through a piecewise-linear ramp of equally spaced colour stops."""
    stops = np.asarray(colours, dtype=np.float64)
    pos = np.clip(t, 0.0, 1.0) * (len(stops) - 1)
    low = np.minimum(np.floor(pos).astype(np.int64), len(stops) - 2)
    frac = (pos - low)[..., None]
    return stops[low] * (1 - frac) + stops[low + 1] * frac


def _pick(index: np.ndarray, colours: list[list[int]]) -> np.ndarray:
    return np.asarray(colours, dtype=np.float64)[np.mod(index, len(colours)).astype(np.int64)]


def _rotated(x: np.ndarray, y: np.ndarray, angle_deg: float) -> tuple[np.ndarray, np.ndarray]:
    a = np.deg2rad(angle_deg)
    return x * np.cos(a) + y * np.sin(a), -x * np.sin(a) + y * np.cos(a)


def _posterize(t: np.ndarray, levels: int) -> np.ndarray:
    """Cut a smooth field into ``levels`` flat bands (0 keeps it smooth), the look of flat-design art."""
    if levels <= 0:
        return t
    return np.minimum(np.floor(t * levels), levels - 1) / max(levels - 1, 1)


def _normalised(field: np.ndarray) -> np.ndarray:
    low, high = float(field.min()), float(field.max())
    return (field - low) / (high - low) if high > low else np.zeros_like(field)


# --- solid colours ------------------------------------------------------------------------------------------


def _sample_solid(rng: np.random.Generator) -> Params:
    return {"colour": _colour(rng)}


def _render_solid(params: Params, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.asarray(params["colour"], dtype=np.float64)[None, None, :]


# --- colour gradients ---------------------------------------------------------------------------------------


def _sample_linear_gradient(rng: np.random.Generator) -> Params:
    return {"colours": _colours(rng, 2, 3), "angle_deg": _angle(rng) * 2}


def _render_linear_gradient(params: Params, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    u, _ = _rotated(x, y, params["angle_deg"])
    return _ramp(_normalised(u), params["colours"])


def _sample_radial_gradient(rng: np.random.Generator) -> Params:
    return {"colours": _colours(rng, 2, 3), "centre": [_num(rng.uniform(0, 1)), _num(rng.uniform(0, 1))],
            "radius": _num(rng.uniform(0.5, 1.2))}


def _render_radial_gradient(params: Params, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    # The centre is given in fractions of width and height; x.max() and y.max() are those in long-side units.
    cx = params["centre"][0] * (x.max() + x.min())
    cy = params["centre"][1] * (y.max() + y.min())
    distance = np.sqrt((x - cx) ** 2 + (y - cy) ** 2)
    return _ramp(distance / params["radius"], params["colours"])


# --- abstract patterns --------------------------------------------------------------------------------------


def _sample_stripes(rng: np.random.Generator) -> Params:
    return {"colours": _colours(rng, 2, 3), "angle_deg": _angle(rng), "period": _num(rng.uniform(0.03, 0.25))}


def _render_stripes(params: Params, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    u, _ = _rotated(x, y, params["angle_deg"])
    return _pick(np.floor(u / params["period"]), params["colours"])


def _sample_checks(rng: np.random.Generator) -> Params:
    cell = _num(rng.uniform(0.03, 0.2))
    return {"colours": _colours(rng, 2, 2), "angle_deg": _angle(rng) / 2, "cell": cell}


def _render_checks(params: Params, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    u, v = _rotated(x, y, params["angle_deg"])
    return _pick(np.floor(u / params["cell"]) + np.floor(v / params["cell"]), params["colours"])


def _sample_dots(rng: np.random.Generator) -> Params:
    spacing = rng.uniform(0.05, 0.2)
    return {"colours": _colours(rng, 2, 2), "angle_deg": _angle(rng) / 2, "spacing": _num(spacing),
            "radius": _num(spacing * rng.uniform(0.15, 0.45))}


def _render_dots(params: Params, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    u, v = _rotated(x, y, params["angle_deg"])
    spacing = params["spacing"]
    du = np.mod(u, spacing) - spacing / 2
    dv = np.mod(v, spacing) - spacing / 2
    inside = (du**2 + dv**2) <= params["radius"] ** 2
    return _pick(inside.astype(np.int64), params["colours"])


def _sample_blobs(rng: np.random.Generator) -> Params:
    count = int(rng.integers(6, 16))
    bumps = [[_num(rng.uniform(-0.1, 1.1)), _num(rng.uniform(-0.1, 1.1)), _num(rng.uniform(0.06, 0.3)),
              _num(rng.choice([-1.0, 1.0]) * rng.uniform(0.5, 1.0))] for _ in range(count)]
    return {"colours": _colours(rng, 2, 4), "bumps": bumps, "levels": int(rng.choice([0, 0, 3, 4, 5, 6]))}


def _render_blobs(params: Params, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """A sum of Gaussian bumps: soft, lava-lamp like blobs, posterized into flat bands half of the time."""
    field = np.zeros(np.broadcast_shapes(x.shape, y.shape))
    for cx, cy, sigma, weight in params["bumps"]:
        field += weight * np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * sigma**2))
    return _ramp(_posterize(_normalised(field), params["levels"]), params["colours"])


def _sample_waves(rng: np.random.Generator) -> Params:
    count = int(rng.integers(1, 4))
    waves = []
    for _ in range(count):
        frequency, angle = rng.uniform(1.0, 8.0), rng.uniform(0, 2 * np.pi)
        phase = rng.uniform(0, 1)
        waves.append([_num(frequency * np.cos(angle)), _num(frequency * np.sin(angle)), _num(phase)])
    return {"colours": _colours(rng, 2, 3), "waves": waves, "levels": int(rng.choice([0, 0, 4, 6, 8]))}


def _render_waves(params: Params, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Interfering sine waves (frequencies in cycles per long side, phase in cycles)."""
    field = np.zeros(np.broadcast_shapes(x.shape, y.shape))
    for fx, fy, phase in params["waves"]:
        field += np.sin(2 * np.pi * (fx * x + fy * y + phase))
    t = 0.5 + 0.5 * field / len(params["waves"])
    return _ramp(_posterize(t, params["levels"]), params["colours"])


GENERATORS: dict[str, _Generator] = {
    "solid": _Generator("solid", _sample_solid, _render_solid),
    "linear_gradient": _Generator("gradient", _sample_linear_gradient, _render_linear_gradient),
    "radial_gradient": _Generator("gradient", _sample_radial_gradient, _render_radial_gradient),
    "stripes": _Generator("pattern", _sample_stripes, _render_stripes),
    "checks": _Generator("pattern", _sample_checks, _render_checks),
    "dots": _Generator("pattern", _sample_dots, _render_dots),
    "blobs": _Generator("pattern", _sample_blobs, _render_blobs),
    "waves": _Generator("pattern", _sample_waves, _render_waves),
}
"""Every generator by name; a manifest entry's ``generator`` field is one of these keys."""
