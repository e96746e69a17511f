"""One view of a bench object: its cut-out photo warped onto a background, with the exact foreground mask.
``sample_view_params`` draws every random choice as plain numbers, ``render_view`` applies them; colour and
alpha travel together through one crop, resize, warp and blur, so the alpha is exactly the compositing
weight. Presets *mild* and *hard* (SOP-like viewpoint changes): docs/bench-dataset.md, *Views and presets*.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np


@dataclass(frozen=True)
class ViewPreset:
    """Ranges the view parameters are drawn from."""

    window_min: float  # smallest visible fraction of each side of the object's bounding box
    scale: tuple[float, float]  # long side of the object as a fraction of the view side
    rotation_deg: float  # rotations are drawn from ±this
    perspective: float  # corner offsets are drawn from ±this, as a fraction of the object's long side
    jitter: float  # brightness, contrast and saturation factors are drawn from 1 ± this
    blur_p: float  # probability of a Gaussian blur
    blur_sigma: tuple[float, float]  # its sigma as a fraction of the view side
    flip_p: float = 0.5


VIEW_PRESETS: dict[str, ViewPreset] = {
    "mild": ViewPreset(window_min=1.0, scale=(0.4, 0.8), rotation_deg=15.0, perspective=0.0, jitter=0.1,
                       blur_p=0.0, blur_sigma=(0.0, 0.0)),
    "hard": ViewPreset(window_min=0.6, scale=(0.4, 0.8), rotation_deg=30.0, perspective=0.12, jitter=0.3,
                       blur_p=0.25, blur_sigma=(0.004, 0.012)),
}


@dataclass(frozen=True)
class ViewParams:
    """Every random choice of one view, rounded to the values the renderer uses."""

    window: tuple[float, float, float, float]  # (left, top, right, bottom), fractions of the object's box
    flip: bool
    scale: float  # long side of the visible window as a fraction of the view side
    position: tuple[float, float]  # where the object sits in the free room: 0 = left/top, 1 = right/bottom
    rotation_deg: float
    perspective: tuple[float, ...]  # (dx, dy) of the four corners, fractions of the object's long side
    brightness: float
    contrast: float
    saturation: float
    blur_sigma: float  # fraction of the view side; 0 = no blur


def sample_view_params(rng: np.random.Generator, preset: str | ViewPreset) -> ViewParams:
    """Draw one view's parameters; the order of draws is fixed, so a seeded rng gives the same view."""
    p = VIEW_PRESETS[preset] if isinstance(preset, str) else preset
    width, height = rng.uniform(p.window_min, 1.0), rng.uniform(p.window_min, 1.0)
    left, top = rng.uniform(0, 1 - width), rng.uniform(0, 1 - height)
    flip = bool(rng.random() < p.flip_p)
    scale = rng.uniform(*p.scale)
    position = (rng.uniform(0, 1), rng.uniform(0, 1))
    rotation = rng.uniform(-p.rotation_deg, p.rotation_deg)
    perspective = rng.uniform(-p.perspective, p.perspective, size=8)
    brightness, contrast, saturation = rng.uniform(1 - p.jitter, 1 + p.jitter, size=3)
    blur = rng.uniform(*p.blur_sigma) if rng.random() < p.blur_p else 0.0
    return ViewParams(
        window=(_r(left), _r(top), _r(left + width), _r(top + height)),
        flip=flip,
        scale=_r(scale),
        position=(_r(position[0]), _r(position[1])),
        rotation_deg=_r(rotation),
        perspective=tuple(_r(v) for v in perspective),
        brightness=_r(brightness),
        contrast=_r(contrast),
        saturation=_r(saturation),
        blur_sigma=_r(blur),
    )


def render_view(
    stamp_rgba: np.ndarray, background_rgb: np.ndarray, params: ViewParams, size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Composite the stamp onto a (size, size, 3) background; return (RGB, alpha), uint8, size × size. The
    alpha is the compositing weight itself (``rgb = α·object + (1 − α)·background`` up to 8-bit rounding)."""
    if background_rgb.shape != (size, size, 3):
        raise ValueError(f"background must be {size}×{size}×3, got {background_rgb.shape}")
    target = params.scale * size
    layer, shrink = _shrunk(_premultiplied(_window(stamp_rgba, params.window)), target)
    layer = _jittered(layer, params)
    if params.flip:
        layer = np.ascontiguousarray(layer[:, ::-1])
    homography = _homography(layer.shape[1], layer.shape[0], shrink, target, params, size)
    warped = cv2.warpPerspective(
        layer, homography, (size, size), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0
    )
    if params.blur_sigma > 0:
        warped = cv2.GaussianBlur(warped, (0, 0), params.blur_sigma * size)
    alpha = np.clip(warped[..., 3], 0.0, 1.0)
    alpha_u8 = np.rint(alpha * 255).astype(np.uint8)
    colour = np.clip(warped[..., :3] / np.maximum(alpha, 1e-6)[..., None], 0.0, 1.0) * 255
    weight = (alpha_u8.astype(np.float32) / 255)[..., None]
    rgb = weight * colour + (1 - weight) * background_rgb.astype(np.float32)
    return np.clip(np.rint(rgb), 0, 255).astype(np.uint8), alpha_u8


def _r(value: float) -> float:
    return round(float(value), 5)


def _window(stamp_rgba: np.ndarray, window: tuple[float, float, float, float]) -> np.ndarray:
    """The visible part: the window's fractions applied to the bounding box of the non-transparent pixels."""
    alpha = stamp_rgba[..., 3] > 0
    rows, cols = np.flatnonzero(alpha.any(axis=1)), np.flatnonzero(alpha.any(axis=0))
    if rows.size == 0:
        raise ValueError("the stamp is fully transparent")
    top, height = rows[0], rows[-1] + 1 - rows[0]
    left, width = cols[0], cols[-1] + 1 - cols[0]
    x0, x1 = left + math.floor(window[0] * width), left + max(math.ceil(window[2] * width), 1)
    y0, y1 = top + math.floor(window[1] * height), top + max(math.ceil(window[3] * height), 1)
    return stamp_rgba[y0:y1, x0:x1]


_LUMA = np.array([0.299, 0.587, 0.114], dtype=np.float32)


def _jittered(layer: np.ndarray, params: ViewParams) -> np.ndarray:
    """Brightness, contrast (around the object's mean grey) and saturation on a premultiplied layer: all
    affine in the colour, so equal to applying them to the straight colour (clip to [0, α] = to [0, 1])."""
    rgb, alpha = layer[..., :3] * params.brightness, layer[..., 3:]
    mean = float((rgb @ _LUMA).sum() / max(float(alpha.sum()), 1e-6))
    rgb = (rgb - mean * alpha) * params.contrast + mean * alpha
    grey = (rgb @ _LUMA)[..., None]
    rgb = (rgb - grey) * params.saturation + grey
    return np.concatenate([np.clip(rgb, 0.0, alpha), alpha], axis=-1)


def _premultiplied(rgba: np.ndarray) -> np.ndarray:
    """Colour times alpha in [0, 1]: resampling never bleeds the colour hidden under transparent pixels."""
    layer = rgba.astype(np.float32) * np.float32(1 / 255)
    layer[..., :3] *= layer[..., 3:]
    return layer


def _shrunk(layer: np.ndarray, target: float) -> tuple[np.ndarray, float]:
    """Area-average the layer down to its final size (a warp alone would alias); return the zoom left."""
    long_side = max(layer.shape[:2])
    if target >= long_side:
        return layer, target / long_side
    height = max(1, round(layer.shape[0] * target / long_side))
    width = max(1, round(layer.shape[1] * target / long_side))
    layer = cv2.resize(layer, (width, height), interpolation=cv2.INTER_AREA)
    return layer, target / max(height, width)


def _homography(
    width: int, height: int, zoom: float, target: float, params: ViewParams, size: int
) -> np.ndarray:
    """Map the layer's corners: zoom and rotate about its centre, displace the corners, move into place."""
    corners = np.array([[0, 0], [width, 0], [width, height], [0, height]], dtype=np.float64)
    centred = (corners - [width / 2, height / 2]) * zoom
    angle = math.radians(params.rotation_deg)
    rotation = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    moved = centred @ rotation.T + np.asarray(params.perspective).reshape(4, 2) * target
    free = max(size - target, 0.0)
    centre = [target / 2 + params.position[0] * free, target / 2 + params.position[1] * free]
    return cv2.getPerspectiveTransform(corners.astype(np.float32), (moved + centre).astype(np.float32))
