"""Typed settings: a value from JSON, the command line or a Python call checked against what it must be.

Configuration sections and a method's or attribution's options are :class:`Settings` (pydantic models whose
fields carry :class:`Must` words for errors). The arguments the commands and the Python API share are each
declared once, as a pydantic type (``REPEATS``): the command line types its options from it
(``bgbias.cli.options.option_type``) and the API validates with :func:`checked`; a wrong one is an
``OptionError`` whose ``parameter`` it is, so each front end names it in its own words.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import os
import reprlib
import types
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
)
from pydantic.fields import FieldInfo

from bgbias.errors import OptionError, given
from bgbias.schema import Must

T = TypeVar("T")


class Settings(BaseModel):
    """A section of settings: strict JSON types (an int is taken for a float, nothing else is converted),
    finite numbers, read-only, and a key it does not declare refused."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid", allow_inf_nan=False)


def must(settings: type[BaseModel], name: str) -> str | None:
    """The :class:`Must` words of field ``name``, if it has them."""
    return next((m.words for m in settings.model_fields[name].metadata if isinstance(m, Must)), None)


def bad_value(key: str, found: str, expected: str) -> OptionError:
    """The error of a setting whose value (``found``, as :func:`bgbias.schema.shown` shows it) is not what
    it must be."""
    return OptionError(f"setting {key} = {found} is invalid", fix=f"{key} must be {expected}")


Declared = Any
"""The declared type of an argument: a type, ``Annotated`` with pydantic's ``Field`` (limits, ``examples``
for the fix) and :class:`Must`, ``Literal`` choices, ``| None`` where None is allowed."""


def _integer(value: Any) -> Any:
    """A numpy integer as the int it is: strict validation takes Python's ints only (never a bool)."""
    return int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else value


def _number(value: Any) -> Any:
    """A numpy number as the float it is (never a bool)."""
    return float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else value


def instance_of(kind: Any, words: str) -> Declared:
    """An argument that must be an instance of ``kind`` (a class, or a union of classes), in ``words``: what
    strict pydantic types cannot say (a path is a str or any ``os.PathLike``)."""

    def check(value: Any) -> Any:
        if not isinstance(value, kind):
            raise ValueError(f"not {words}")
        return value

    return Annotated[Any, AfterValidator(check), Must(words)]


class Code(str):
    """An example shown as the code it is (``log=print``), not as a string (``log='print'``)."""

    def __repr__(self) -> str:
        return str(self)


INTEGER = Annotated[int, BeforeValidator(_integer)]
NUMBER = Annotated[float, BeforeValidator(_number)]
PATH_TEXT = instance_of(str | os.PathLike, "a path (str or os.PathLike)")
PATH = Annotated[PATH_TEXT | None, Field(examples=["folder"])]
"""A file or folder that has a default."""
FLAG = Annotated[bool, Field(examples=[True])]
SPLIT = Annotated[Literal["test", "val", "all"], Field(examples=["test"])]
CHOSEN_SPLIT = Annotated[Literal["test", "val", "all"] | None, Field(examples=["all"])]
"""The evaluated split of ``bgbias eval`` and ``audit``; None: ``all`` for a model bgbias did not train on
one's own images, else ``test`` (``measurement.request.chosen_split``)."""
LEAKAGE_SPLIT = Annotated[Literal["train", "test", "all"], Field(examples=["test"])]
"""The split the leakage meter measures: before training, the training split is as telling as the test's."""
FILL = Annotated[Literal["black", "tiled", "inpainted"], Field(examples=["inpainted"])]
"""How an object's hole is filled (``bgbias.variants.variants.without_object``): black keeps the object's
silhouette (a shape a model can read), tiling and inpainting hide it."""
PROTOCOL = Annotated[Literal["fixed", "cv4"], Field(examples=["fixed"])]
FOLD = Annotated[INTEGER, Field(ge=0, le=3, examples=[0])]
REPEATS = Annotated[INTEGER, Field(ge=1, examples=[5])]
"""Corrupted repeats: at least one (no corrupted sets at all is ``corrupted=False``)."""
SEED = Annotated[INTEGER, Field(ge=0, examples=[0])]
WORST_K = Annotated[INTEGER, Field(ge=1, examples=[10])]
MAX_MEMORY = Annotated[Annotated[INTEGER, Field(ge=1)] | None, Field(examples=[2**30])]
"""Bytes that scoring's neighbour lists may take at once (bgbias.retrieval.metrics); None: 1 GiB."""
BATCH_SIZE = Annotated[INTEGER, Field(ge=1, examples=[64])]
COUNT = Annotated[Annotated[INTEGER, Field(ge=1)] | None, Field(examples=[32])]
"""A number of images (a limit, a batch) that has a default."""
GALLERY_COUNT = Annotated[INTEGER, Field(ge=0, examples=[16])]
WORKERS = Annotated[Annotated[INTEGER, Field(ge=0)] | None, Field(examples=[2])]
"""Data-loader processes; None sizes them to the machine (bgbias.hardware)."""
AMP = Annotated[Literal["auto", "off", "bf16", "fp16"] | None, Field(examples=["off"])]
"""Autocast while a model embeds (a run's ``amp``, ``bgbias.engine.device.resolve_amp``): auto (bfloat16 on
CUDA, float32 on a CPU), off (float32), bf16 (CUDA, or a CPU that computes it natively), fp16 (CUDA); None:
the model's default."""
MEMORY_FORMAT = Annotated[Literal["contiguous", "channels_last"] | None, Field(examples=["contiguous"])]
"""The layout of a model's weights and inputs (a run's ``model.memory_format``); None: the model's default."""
DEVICE = Annotated[str, Field(examples=["cpu"])]
"""A torch device: auto, cpu, cuda or cuda:N (checked when it is resolved)."""

EXPLAIN_IMAGES = 200
"""Test images of each study run whose attribution maps are scored (25 backward passes each); spread evenly
over the split."""

DEFAULT_MASK_MODEL = "u2netp"
"""The mask model of ``bgbias masks``, the API and a study on a real dataset when none is named: U²-Net's
small model, the one ``bgbias assets fetch`` installs (4.6 MB; the paper's ``u2net``, 176 MB, is fetched
only when named). Its masks go to ``masks/<dataset key>``, another model's beside them
(``data.items.default_masks_dir``)."""
MASK_DEVICE = Annotated[Literal["auto", "cpu", "cuda"], Field(examples=["cpu"])]
MASK_BACKEND = Annotated[Literal["auto", "torch", "onnxruntime"], Field(examples=["torch"])]
"""What runs the mask network (``bgbias.saliency.sessions``): bgbias's PyTorch U²-Net, batched, or the ONNX
file in onnxruntime; auto: torch on CUDA where it has the model's network, else onnxruntime
(``bgbias.saliency.sessions.chosen_backend``)."""
PIXELS = Annotated[Annotated[INTEGER, Field(ge=1)] | None, Field(examples=[224])]
INTERPOLATION = Annotated[Literal["bilinear", "bicubic"], Field(examples=["bicubic"])]
"""How an image is resized for evaluation (``bgbias.data.geometry``); bilinear, the first, is the default."""
TEXT = Annotated[str, Field(examples=["name"])]
OPTIONAL_TEXT = Annotated[str | None, Field(examples=["name"])]
LOG = Annotated[Callable[[str], None] | None, Must("a function that takes each line (print, say)"),
                Field(examples=[Code("print")])]
"""Where a long job's progress lines go; None: nowhere."""


def choices(declared: Declared) -> tuple[Any, ...]:
    """The values a ``Literal`` argument may take (none for any other)."""
    kind = bare_type(declared)
    return typing.get_args(kind) if typing.get_origin(kind) is Literal else ()


def limits(declared: Declared) -> tuple[Any, Any]:
    """The least and the greatest value an argument may take (None where unbounded)."""
    least = greatest = None
    for note in _notes(declared):
        least = getattr(note, "ge", least)
        greatest = getattr(note, "le", greatest)
    return least, greatest


def expected(declared: Declared) -> str:
    """What an argument must be, in words: ``an integer of at least 1``, ``one of test, val, or None``."""
    kind = bare_type(declared)
    words = next((note.words for note in _notes(declared) if isinstance(note, Must)), None)
    if words is None and choices(declared):
        words = "one of " + ", ".join(map(str, choices(declared)))
    if words is None:
        words = {int: "an integer", float: "a number", bool: "True or False", str: "a string"}[kind]
        least, greatest = limits(declared)
        if least is not None and greatest is not None:
            words += f" from {least} to {greatest}"
        elif least is not None:
            words += f" of at least {least}"
    return words + (", or None" if type(None) in _parts(declared) else "")


def _notes(declared: Declared) -> list[Any]:
    """The metadata of ``declared`` and of the types inside it (a ``Field``'s limits as their own notes)."""
    found = []
    for part in _parts(declared):
        for note in typing.get_args(part)[1:] if typing.get_origin(part) is Annotated else ():
            found += [note, *note.metadata] if isinstance(note, FieldInfo) else [note]
    return found


def _parts(declared: Declared) -> list[Any]:
    """``declared`` and every type nested in it through ``Annotated`` and unions."""
    if typing.get_origin(declared) is Annotated:
        return [declared, *_parts(typing.get_args(declared)[0])]
    if typing.get_origin(declared) in (typing.Union, types.UnionType):
        return [part for option in typing.get_args(declared) for part in _parts(option)]
    return [declared]


def bare_type(declared: Declared) -> Any:
    """The type an argument holds, without its notes and without None."""
    return next(part for part in _parts(declared)
                if typing.get_origin(part) is not Annotated and part is not type(None))


def example(declared: Declared) -> Any:
    """The value a fix suggests for an argument."""
    return next(note.examples[0] for note in _notes(declared)
                if isinstance(note, FieldInfo) and note.examples)


class Arguments:
    """Arguments declared by name (``repeats=REPEATS``), validated together by one pydantic model: what the
    command line types its options from too (``bgbias.cli.options.option_type``), one declaration for
    both."""

    def __init__(self, **declared: Declared):
        self.declared = declared
        self._model = create_model("Arguments", __config__=_STRICT,  # a value not given is not checked
                                   **{name: (kind, None) for name, kind in declared.items()})

    def valid(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The declared arguments of ``values``, validated (a numpy integer as an int); the first wrong one
        is an ``OptionError`` whose ``parameter`` it is, naming a value it could take."""
        passed = {name: values[name] for name in self.declared if name in values}
        try:
            valid = self._model.model_validate(passed)
        except ValidationError as error:
            name = str(error.errors(include_url=False)[0]["loc"][0])
            declared = self.declared[name]
            raise OptionError(f"{given(_SHOWN.repr(passed[name]))} is invalid: it must be "
                              f"{expected(declared)}", fix=f"pass {given(repr(example(declared)))}",
                              parameter=name) from None
        return {name: getattr(valid, name) for name in passed}


_SHOWN = reprlib.Repr()
"""A wrong value as an error shows it: a list of ten thousand ids as its first few."""
_SHOWN.maxstring = _SHOWN.maxother = 60
_STRICT = ConfigDict(strict=True, allow_inf_nan=False, arbitrary_types_allowed=True)


def checked(**declared: Declared) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """A function whose arguments named in ``declared`` (:class:`Arguments`) are validated on every call,
    before it runs, and passed on as validated; the checked function's ``arguments`` holds them."""
    arguments = Arguments(**declared)

    def decorate(function: Callable[..., T]) -> Callable[..., T]:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def validated(*args: Any, **kwargs: Any) -> T:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            bound.arguments.update(arguments.valid(bound.arguments))
            return function(*bound.args, **bound.kwargs)

        validated.arguments = arguments  # type: ignore[attr-defined]
        return validated

    return decorate
