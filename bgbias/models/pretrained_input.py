"""The preprocessing a timm model or a torchvision weights enum declares, read so that bgbias reproduces it.

Both resize the shorter side, centre-crop a square and normalise: bgbias's evaluation geometry with that
interpolation gives the same pixels. What it cannot give (another crop mode, a non-square input, another
filter, a preset of another task) is refused, naming the argument, rather than scored on other pixels.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torchvision

from bgbias.data.geometry import INTERPOLATIONS
from bgbias.errors import OptionError

TIMM_DEFAULTS: Mapping[str, Any] = {"input_size": (3, 224, 224), "interpolation": "bicubic",
                                    "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225),
                                    "crop_pct": 0.875, "crop_mode": "center"}
"""What timm's ``resolve_data_config`` takes where a ``pretrained_cfg`` is silent (timm 1.0): used only
where timm itself is not importable."""


@dataclass(frozen=True)
class Preprocessing:
    """A model's own evaluation preprocessing: shorter side resized to ``resize`` with ``interpolation``, a
    centred ``crop × crop`` square, ``(x − mean) / std`` per RGB channel; ``resize_at`` gives the resize its
    pipeline would use at another crop size."""

    crop: int
    resize: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    interpolation: str
    resize_at: Callable[[int], int]


def timm_preprocessing(model: Any) -> Preprocessing:
    """The preprocessing of a timm model (its ``pretrained_cfg``, resolved by timm's own
    ``resolve_model_data_config`` where timm is importable), or an ``OptionError`` naming ``model=``."""
    cfg = getattr(model, "pretrained_cfg", None)
    if cfg is None:
        cfg = getattr(model, "default_cfg", None)  # timm's name for it before 0.8
    if not isinstance(cfg, Mapping):
        raise OptionError(
            f"model={type(model).__name__} has no pretrained_cfg: it is not a timm model",
            fix="pass a model made by timm.create_model, or state its input yourself with "
                "bgbias.ModelInput(input_size=..., resize=..., normalize=..., interpolation=...)")
    config = _timm_data_config(model, cfg)
    channels, height, width = _three(config["input_size"], "input_size")
    if channels != 3 or height != width:
        raise OptionError(
            f"model= wants input of size {tuple(config['input_size'])} (channels, height, width); bgbias "
            "evaluates RGB images as a square centre crop", fix=_STATE_IT)
    crop_mode = config["crop_mode"] or TIMM_DEFAULTS["crop_mode"]
    if crop_mode != "center":
        raise OptionError(
            f"model= is evaluated with timm's crop_mode={crop_mode!r}; bgbias reproduces only 'center' "
            "(shorter side resized, centre crop)", fix=_STATE_IT)
    crop_pct = config["crop_pct"] or TIMM_DEFAULTS["crop_pct"]

    def resize_at(size: int) -> int:
        return math.floor(size / crop_pct)  # timm's transforms_imagenet_eval

    if resize_at(height) < height:
        raise OptionError(
            f"model= has crop_pct={crop_pct!r}: its pipeline pads the resized image to the {height} px crop, "
            "which bgbias does not reproduce", fix=_STATE_IT)
    return Preprocessing(height, resize_at(height), _rgb(config["mean"], "mean", "model="),
                         _rgb(config["std"], "std", "model="),
                         _interpolation(config["interpolation"], "model="), resize_at)


def torchvision_preprocessing(weights: Any) -> Preprocessing:
    """The preprocessing of a torchvision weights enum member (its ``transforms()`` preset, built without
    downloading anything), or an ``OptionError`` naming ``weights=``."""
    if not isinstance(weights, torchvision.models.WeightsEnum):
        raise OptionError(
            f"weights={weights!r} is not a torchvision weights enum member",
            fix="pass a member such as torchvision.models.ResNet50_Weights.IMAGENET1K_V2 (or "
                "torchvision.models.get_weight('ResNet50_Weights.IMAGENET1K_V2'))")
    preset = weights.transforms()
    if not isinstance(preset, torchvision.transforms._presets.ImageClassification):
        raise OptionError(
            f"weights={weights} come with the preset {type(preset).__name__}, not an image classification "
            "one: bgbias reproduces only resize, centre crop and normalisation", fix=_STATE_IT)
    (crop,), (resize,) = preset.crop_size, preset.resize_size
    if resize < crop:
        raise OptionError(f"weights={weights} resize to {resize} px before a {crop} px crop, which pads",
                          fix=_STATE_IT)

    def resize_at(size: int) -> int:
        return size * resize // crop  # the preset's resize-to-crop proportion

    argument = f"weights={weights}"
    return Preprocessing(crop, resize, _rgb(preset.mean, "mean", argument), _rgb(preset.std, "std", argument),
                         _interpolation(preset.interpolation.value, argument), resize_at)


_STATE_IT = ("state the input bgbias should give it yourself, with bgbias.ModelInput(input_size=..., "
             "resize=..., normalize=..., interpolation=...), knowing that it differs from the model's own "
             "preprocessing")


def _timm_data_config(model: Any, cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """timm's own resolution of ``model``'s data config, or, without timm, ``cfg`` over timm's defaults."""
    if importlib.util.find_spec("timm") is None:
        return {key: cfg.get(key) or default for key, default in TIMM_DEFAULTS.items()}
    from timm.data import resolve_model_data_config

    return resolve_model_data_config(model)


def _three(values: Any, key: str) -> tuple[Any, ...]:
    values = tuple(values)
    if len(values) != 3:
        raise OptionError(f"model= has {key}={values!r}, not three values", fix=_STATE_IT)
    return values


def _rgb(values: Any, key: str, argument: str) -> tuple[float, float, float]:
    """Three finite numbers (a std positive), one per RGB channel."""
    numbers = tuple(float(value) for value in values)
    if len(numbers) != 3 or not all(math.isfinite(n) and (key == "mean" or n > 0) for n in numbers):
        above = " above 0" if key == "std" else ""
        raise OptionError(f"{argument} normalises with {key}={tuple(values)!r}, not three finite "
                          f"numbers{above} (one per RGB channel)", fix=_STATE_IT)
    return numbers  # type: ignore[return-value]


def _interpolation(name: str, argument: str) -> str:
    if name not in INTERPOLATIONS:
        raise OptionError(
            f"{argument} resizes its images with {name!r} interpolation; bgbias resizes with "
            f"{' or '.join(INTERPOLATIONS)}", fix=_STATE_IT)
    return name
