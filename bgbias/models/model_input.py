"""How a model that bgbias did not train wants its images and gives its embeddings, as its user states it.

A TorchScript, ONNX or factory model carries no record of its input: its user states it (``bgbias eval
--model … --input-size --resize --normalize …``) and reports record it. Defaults: the dataset's evaluation
geometry, ImageNet normalisation, a single output tensor, L2-normalised. Timm and torchvision models declare
their own preprocessing (:meth:`ModelInput.from_timm`, :meth:`ModelInput.from_torchvision`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field

from bgbias.data.geometry import INTERPOLATIONS, EvalGeometry
from bgbias.data.transforms import eval_geometry
from bgbias.errors import PARAMETER, OptionError, given
from bgbias.models.input_convention import CLIP, IMAGENET, UNIT, InputConvention
from bgbias.models.pretrained_input import Preprocessing, timm_preprocessing, torchvision_preprocessing
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
