"""Which device and mixed precision a run uses: CUDA when present, else the CPU, with the same code."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from bgbias.errors import OptionError, given
from bgbias.hardware import default_loader_workers
from bgbias.host_memory import keep_freed_memory
from bgbias.options import MEMORY_FORMAT, choices

if TYPE_CHECKING:
    from bgbias.engine.config import TrainConfig


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """``auto`` → ``cuda:<local_rank>`` when CUDA is available, else ``cpu``; ``cuda[:N]``/``cpu`` as is.
    Every run that computes settles its device here, so here its host memory is kept for reuse
    (:mod:`bgbias.host_memory`)."""
    keep_freed_memory()
    if name == "auto":
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise OptionError(f"unknown device {name!r}", fix="use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        missing = missing_cuda(device.index)
        if missing is not None:
            present = cuda_devices()
            raise OptionError(f"device {name!r} was asked for, but {missing}",
                              fix=f"use {given('cpu')} (or auto){', or one of ' if present else ''}"
                                  f"{', '.join(present)}", parameter="device")
        if device.index is None:
            device = torch.device(f"cuda:{local_rank}")
    elif device.type != "cpu":
        raise OptionError(f"device type {device.type!r} is not supported", fix="use auto, cpu or cuda")
    return device


def missing_cuda(index: int | None) -> str | None:
    """Why CUDA device ``index`` (None: any) cannot be used here, or None."""
    if not torch.cuda.is_available():
        return "CUDA is not available"
    count = torch.cuda.device_count()
    if index is not None and index >= count:
        return f"there is no cuda:{index} (this machine has {count} GPU{'s' * (count != 1)})"
    return None


def cuda_devices() -> list[str]:
    if not torch.cuda.is_available():
        return []
    return [f"cuda:{index}" for index in range(torch.cuda.device_count())]


def resolve_amp(amp: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of the networks. ``auto``: bfloat16 on CUDA that supports it (else float16), float32
    on a CPU, where bfloat16 moves embeddings beyond rounding without speeding training up (docs/hardware.md).
    ``bf16`` on a CPU needs native bfloat16 arithmetic (emulated it is slower than float32)."""
    if amp == "off" or (amp == "auto" and device.type != "cuda"):
        return None
    if device.type != "cuda":
        if amp == "bf16" and cpu_has_native_bf16():
            return torch.bfloat16
        needs = ("a CPU with native bfloat16 arithmetic (AVX-512 BF16 or AMX) or a CUDA device"
                 if amp == "bf16" else "a CUDA device")
        raise OptionError(f"amp={amp!r} needs {needs}",
                          fix=f"use {given('off')} (or auto) on this CPU (a training: its setting amp=off)",
                          parameter="amp")
    if amp == "fp16" or (amp == "auto" and not torch.cuda.is_bf16_supported()):
        return torch.float16
    return torch.bfloat16


def precision_name(dtype: torch.dtype | None) -> str:
    return "float32" if dtype is None else str(dtype).removeprefix("torch.")


def compute_record(config: TrainConfig, device: torch.device) -> dict[str, Any]:
    """What a run records of how it used the machine (docs/hardware.md says which of these change bits)."""
    return {"precision": precision_name(resolve_amp(config.amp, device)),
            "memory_format": config.model.memory_format, "compile": config.model.compile,
            "loader_workers": loader_workers(config.data.workers, device),
            "cpu_threads": torch.get_num_threads(), "host_memory": keep_freed_memory()}


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bfloat16 in hardware (AVX-512 BF16 or AMX), as torch detects it."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, probe, lambda: False)() for probe in probes)


def loader_workers(setting: int | str | None, device: torch.device) -> int:
    """Data-loader worker processes: a number as given; ``auto`` (or None) sized to the machine."""
    return default_loader_workers(device.type) if setting in ("auto", None) else int(setting)


def memory_format(name: str) -> torch.memory_format:
    return {"contiguous": torch.contiguous_format, "channels_last": torch.channels_last}[name]


def memory_format_name(layout: torch.memory_format) -> str:
    return next(name for name in choices(MEMORY_FORMAT) if memory_format(name) == layout)


def model_memory_format(model: Any) -> str | None:
    """A model's ``memory_format`` as records name it, or None for a model that does not say."""
    layout = getattr(model, "memory_format", None)
    return None if layout is None else memory_format_name(layout)
