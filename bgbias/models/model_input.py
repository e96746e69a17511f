"""How a model that bgbias did not train wants its images and gives its embeddings, as its user states it.

A TorchScript, ONNX or factory model carries no record of its input: its user states it (``bgbias eval
--model … --input-size --resize --normalize …``) and reports record it. Defaults: the dataset's evaluation
geometry, ImageNet normalisation, a single output tensor, L2-normalised. Timm and torchvision models declare
their own preprocessing (:meth:`ModelInput.from_timm`, :meth:`ModelInput.from_torchvision`), which bgbias
reproduces pixel for pixel (shorter side resized, centre crop, normalisation) or refuses, naming the argument
(another crop mode, a non-square input, another filter or task), rather than score other pixels.
"""

from __future__ import annotations

import importlib.util
import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Annotated, Any

import torchvision
from pydantic import Field

from bgbias.data.geometry import INTERPOLATIONS, EvalGeometry
from bgbias.data.transforms import eval_geometry
from bgbias.errors import PARAMETER, OptionError, given
from bgbias.models.input_convention import CLIP, IMAGENET, UNIT, InputConvention
from bgbias.options import FLAG, INTERPOLATION, OPTIONAL_TEXT, PIXELS, Arguments

if TYPE_CHECKING:
    from torch import Tensor

NORMALIZATIONS = {"imagenet": IMAGENET, "clip": CLIP, "none": UNIT}
"""The named normalisations of ``--normalize``; ``MEAN,STD`` (two or six numbers) states any other."""

ARGUMENTS = Arguments(input_size=PIXELS, resize=PIXELS,
                      normalize=Annotated[str, Field(examples=["imagenet"])], output_key=OPTIONAL_TEXT,
                      l2_normalize=FLAG, interpolation=INTERPOLATION)


@dataclass(frozen=True)
class ModelInput:
    """The input convention and output reading of a model (fields: docs/models.md). ``resize`` defaults to
    the dataset's, or with another ``input_size`` to the dataset's resize-to-crop ratio at that size."""

    input_size: int | None = None
    resize: int | None = None
    normalize: str = "imagenet"
    output_key: str | None = None
    l2_normalize: bool = True
    interpolation: str = INTERPOLATIONS[0]

    def __post_init__(self) -> None:
        if isinstance(self.output_key, numbers.Integral) and not isinstance(self.output_key, bool):
            object.__setattr__(self, "output_key", str(self.output_key))  # a tuple's position, as the CLI's
        check_model_input({field.name: getattr(self, field.name) for field in fields(self)})

    @classmethod
    def from_timm(cls, model: Any, **overrides: Any) -> ModelInput:
        """The input a timm model's ``pretrained_cfg`` gives it; ``overrides`` are fields of this class."""
        return cls._of(timm_preprocessing(model), overrides, "ModelInput.from_timm")

    @classmethod
    def from_torchvision(cls, weights: Any, **overrides: Any) -> ModelInput:
        """The input a torchvision weights enum's ``transforms()`` preset gives (nothing downloaded)."""
        return cls._of(torchvision_preprocessing(weights), overrides, "ModelInput.from_torchvision")

    @classmethod
    def _of(cls, preprocessing: Preprocessing, overrides: dict[str, Any], caller: str) -> ModelInput:
        unknown = sorted(set(overrides) - set(ARGUMENTS.declared))
        if unknown:
            extra = f"{unknown[0]}={overrides[unknown[0]]!r}"
            raise OptionError(f"{caller} got {extra}, which is not a field of bgbias.ModelInput",
                              fix=f"pass only {', '.join(f'{key}=' for key in ARGUMENTS.declared)}")
        size = overrides.get("input_size", preprocessing.crop)
        if "input_size" in overrides and "resize" not in overrides and size is not None:
            check_model_input({"input_size": size})
            overrides = {**overrides, "resize": preprocessing.resize_at(size)}
        stated = {"input_size": preprocessing.crop, "resize": preprocessing.resize,
                  "normalize": normalization_text(preprocessing.mean, preprocessing.std),
                  "interpolation": preprocessing.interpolation}
        return cls(**{**stated, **overrides})

    @property
    def convention(self) -> InputConvention:
        return parse_normalization(self.normalize)

    def normalize_batch(self, images: Tensor) -> Tensor:
        """(B, 3, H, W) float RGB in [0, 1] → ``(x − mean) / std`` per channel, the model's input."""
        return self.convention.apply(images)

    def geometry(self, dataset_name: str) -> EvalGeometry:
        default = eval_geometry(dataset_name)
        crop = self.input_size or default.crop
        if self.resize is not None:
            resize = self.resize
        elif self.input_size is None:
            resize = default.resize
        else:
            resize = max(crop, round(crop * default.resize / default.crop))
        return EvalGeometry(resize, crop, self.interpolation)

    def as_dict(self) -> dict[str, Any]:
        """What a report records and the fingerprint covers (interpolation only where not bilinear)."""
        convention = self.convention
        recorded = {"input_size": self.input_size, "resize": self.resize, "normalize": self.normalize,
                    "mean": list(convention.mean), "std": list(convention.std), "output_key": self.output_key,
                    "l2_normalize": self.l2_normalize}
        if self.interpolation != INTERPOLATIONS[0]:
            recorded["interpolation"] = self.interpolation
        return recorded

    def describe(self) -> str:
        """One line for the terminal, defaults named as such."""
        convention = self.convention
        if self.input_size is None and self.resize is None:
            geometry = "the dataset's evaluation geometry"
        else:
            crop = f"{self.input_size} px" if self.input_size else "the dataset's"
            resize = (f"shorter side {self.resize}" if self.resize
                      else "shorter side in the dataset's resize-to-crop proportion")
            geometry = f"{crop} centre crop after resizing to {resize}"
        if self.interpolation != INTERPOLATIONS[0]:
            geometry += f" ({self.interpolation})"
        numbers = ", ".join(f"{m:g}/{s:g}" for m, s in zip(convention.mean, convention.std, strict=True))
        output = f"its {self.output_key!r} entry" if self.output_key is not None else "the output tensor"
        scaled = "L2-normalised" if self.l2_normalize else "as it is (no L2 normalisation)"
        return (f"input: {geometry}, RGB in [0, 1] normalised by {self.normalize} (mean/std per channel "
                f"{numbers}); embedding: {output}, {scaled}")


def check_model_input(values: Mapping[str, Any]) -> None:
    """Refuse a convention that cannot be, before any work; each error's ``parameter`` is the field."""
    ARGUMENTS.valid(values)
    input_size, resize = values.get("input_size"), values.get("resize")
    if input_size is not None and resize is not None and resize < input_size:
        raise OptionError(f"{given(repr(resize))} is smaller than the input size {input_size}",
                          fix=f"the centre crop is cut from the resized image: pass {given(input_size)} "
                              "or more", parameter="resize")
    parse_normalization(values.get("normalize", "imagenet"))


def normalization_text(mean: tuple[float, float, float], std: tuple[float, float, float]) -> str:
    """``normalize`` for ``mean`` and ``std``: a name of :data:`NORMALIZATIONS`, else ``MEAN,STD`` (two
    numbers where the channels agree, six otherwise) that reads back exactly."""
    for name, convention in NORMALIZATIONS.items():
        if (convention.mean, convention.std) == (mean, std):
            return name
    numbers = [mean[0], std[0]] if len(set(mean)) == len(set(std)) == 1 else [*mean, *std]
    return ",".join(repr(float(number)) for number in numbers)


def parse_normalization(text: str) -> InputConvention:
    """``imagenet``, ``clip``, ``none``, or ``MEAN,STD`` (two or six numbers) as an InputConvention."""
    named = NORMALIZATIONS.get(text.strip().lower())
    if named is not None:
        return named
    fix = (f"pass {PARAMETER} as imagenet, clip or none, or MEAN,STD as two numbers (all channels) or six "
           f"(three means, then three stds), e.g. {given(repr('0.5,0.5'))}")
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise OptionError(f"{given(repr(text))} is neither a known normalisation nor numbers", fix=fix,
                          parameter="normalize") from None
    if len(values) not in (2, 6) or not all(math.isfinite(n) for n in values):
        raise OptionError(f"{given(repr(text))} must give two or six finite numbers", fix=fix,
                          parameter="normalize")
    mean, std = (values[:1] * 3, values[1:] * 3) if len(values) == 2 else (values[:3], values[3:])
    if min(std) <= 0:
        raise OptionError(f"{given(repr(text))} has a std that is not positive", fix=fix,
                          parameter="normalize")
    return InputConvention(mean=tuple(mean), std=tuple(std))


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
    size = tuple(config["input_size"])
    if len(size) != 3:
        raise OptionError(f"model= has input_size={size!r}, not three values", fix=_STATE_IT)
    channels, height, width = size
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
