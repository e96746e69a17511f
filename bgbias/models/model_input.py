"""How a model that bgbias did not train wants its images and gives its embeddings, as its user states it.

A TorchScript file, an ONNX file or a module from someone's factory carries no record of its input: its
user says it (``bgbias eval --model … --input-size --resize --normalize --output-key --no-l2-normalize``),
and reports record it. The defaults are the common ones: the dataset's own evaluation geometry (so the
images, and the corrupted sets, are those every trained run is scored on), ImageNet normalisation, a single
output tensor, L2-normalised (ranked by cosine similarity, as metric learning does).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from bgbias.data.geometry import EvalGeometry
from bgbias.data.transforms import eval_geometry
from bgbias.errors import OptionError
from bgbias.models.input_convention import CLIP, IMAGENET, UNIT, InputConvention
from bgbias.options import FLAG, OPTIONAL_TEXT, PIXELS, Rule, check_arguments, shown

NORMALIZATIONS = {"imagenet": IMAGENET, "clip": CLIP, "none": UNIT}
"""The named normalisations of ``--normalize``; ``MEAN,STD`` (two or six numbers) states any other."""

RULES = {"input_size": PIXELS, "resize": PIXELS, "normalize": Rule(str, example="imagenet"),
         "output_key": OPTIONAL_TEXT, "l2_normalize": FLAG}
"""What each field must be (the command line's options are typed from the same rules)."""


@dataclass(frozen=True)
class ModelInput:
    """The input convention and output reading of a model (see the module docstring).

    ``input_size``: side of the square crop the model sees (default: the dataset's evaluation crop);
    ``resize``: the shorter side the image is resized to before the centre crop (default: the dataset's, or,
    with another ``input_size``, the dataset's resize-to-crop ratio at that size); ``normalize``: a name of
    :data:`NORMALIZATIONS` or ``MEAN,STD``; ``output_key``: the entry of a dict output, or the position of a
    tuple output, that holds the embedding; ``l2_normalize``: scale each embedding to unit length.
    """

    input_size: int | None = None
    resize: int | None = None
    normalize: str = "imagenet"
    output_key: str | None = None
    l2_normalize: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.output_key, numbers.Integral) and not isinstance(self.output_key, bool):
            object.__setattr__(self, "output_key", str(self.output_key))  # a tuple's position, as the CLI's
        check_model_input({field.name: getattr(self, field.name) for field in fields(self)})

    @property
    def convention(self) -> InputConvention:
        """The normalisation ``normalize`` names."""
        return parse_normalization(self.normalize)

    def geometry(self, dataset_name: str) -> EvalGeometry:
        """The evaluation geometry on dataset ``dataset_name`` (see the class docstring for the defaults)."""
        default = eval_geometry(dataset_name)
        crop = self.input_size or default.crop
        if self.resize is not None:
            resize = self.resize
        elif self.input_size is None:
            resize = default.resize
        else:
            resize = max(crop, round(crop * default.resize / default.crop))
        return EvalGeometry(resize, crop)

    def as_dict(self) -> dict[str, Any]:
        """What a report records and the model's fingerprint covers: the convention as given, with the
        normalisation's numbers."""
        convention = self.convention
        return {"input_size": self.input_size, "resize": self.resize, "normalize": self.normalize,
                "mean": list(convention.mean), "std": list(convention.std), "output_key": self.output_key,
                "l2_normalize": self.l2_normalize}

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
        numbers = ", ".join(f"{m:g}/{s:g}" for m, s in zip(convention.mean, convention.std, strict=True))
        output = f"its {self.output_key!r} entry" if self.output_key is not None else "the output tensor"
        scaled = "L2-normalised" if self.l2_normalize else "as it is (no L2 normalisation)"
        return (f"input: {geometry}, RGB in [0, 1] normalised by {self.normalize} (mean/std per channel "
                f"{numbers}); embedding: {output}, {scaled}")


def check_model_input(values: Mapping[str, Any], names: Mapping[str, str] | None = None) -> None:
    """Refuse a convention that cannot be (each field's :data:`RULES`, a resize smaller than the crop, an
    unknown normalisation) before any work, naming each field as ``names`` says: the command line passes its
    options (``--input-size``), Python callers get the field names (``input_size=``)."""
    check_arguments(values, RULES, names)

    def name(key: str) -> str:
        return (names or {}).get(key, key)

    input_size, resize = values.get("input_size"), values.get("resize")
    if input_size is not None and resize is not None and resize < input_size:
        crop = shown(name("input_size"), input_size)
        raise OptionError(f"{shown(name('resize'), resize)} is smaller than {crop}",
                          fix=f"the centre crop is cut from the resized image: pass {name('resize')} >= "
                              f"{name('input_size')}")
    parse_normalization(values.get("normalize", "imagenet"), name("normalize"))


def parse_normalization(text: str, name: str = "normalize") -> InputConvention:
    """``imagenet``, ``clip``, ``none``, or ``MEAN,STD`` as two numbers (every channel) or six (three means,
    then three stds), as an :class:`InputConvention`; anything else is an ``OptionError`` naming the
    argument ``name``."""
    named = NORMALIZATIONS.get(text.strip().lower())
    if named is not None:
        return named
    fix = (f"pass {name} as imagenet, clip or none, or MEAN,STD as two numbers (all channels) or six (three "
           f"means, then three stds), e.g. {shown(name, '0.5,0.5')}")
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise OptionError(f"{shown(name, text)} is neither a known normalisation nor numbers",
                          fix=fix) from None
    if len(values) not in (2, 6) or not all(math.isfinite(n) for n in values):
        raise OptionError(f"{shown(name, text)} must give two or six finite numbers", fix=fix)
    mean, std = (values[:1] * 3, values[1:] * 3) if len(values) == 2 else (values[:3], values[3:])
    if min(std) <= 0:
        raise OptionError(f"{shown(name, text)} has a std that is not positive", fix=fix)
    return InputConvention(mean=tuple(mean), std=tuple(std))
