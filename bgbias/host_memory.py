"""How the C allocator of the host treats a run's large, short-lived buffers.

glibc's malloc gives every block above its mmap threshold (128 KiB at first, raised as it sees such blocks
freed, to 32 MiB at most) fresh pages from the kernel and returns them when the block is freed; it trims freed
memory at the top of its heap beyond twice that threshold; and a thread other than the main one allocates from
an arena of 64 MiB heaps, made and unmapped as they fill and empty. A network on the CPU makes and frees
buffers of megabytes in every layer, so every layer touched pages the kernel had to fault in and zero again:
on 2 cores most of the system time of an embedding pass and of the masks step (docs/benchmarks.md, *Host
memory*). PyTorch's performance guide suggests preloading another allocator for this; bgbias reaches the same
from inside the process with glibc's ``mallopt``: every block comes from the heap (no block of its own from
the kernel), up to 1 GiB freed at the heap's top stays for the next layer, and every thread allocates from
the main heap (one arena: the network threads of the masks step too). The heap then holds the run's peak
until the process ends, above glibc's own peak (up to a fifth in the runs of docs/benchmarks.md); results do
not change, only where the bytes live.

A process that chose its allocator keeps its choice: another one preloaded (``LD_PRELOAD``), or glibc's own
settings in the environment (``GLIBC_TUNABLES`` with ``glibc.malloc``, ``MALLOC_*_``).
``BGBIAS_KEEP_FREED_MEMORY=0`` keeps glibc's defaults (naming one of glibc's variables at its default would
not: setting a threshold or the top pad stops glibc from adapting its mmap threshold).
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
from collections.abc import Mapping

KERNEL_BLOCKS = 0
"""Blocks glibc may map from the kernel on their own: none, so every block comes from the heap."""
TRIM_THRESHOLD = 1 << 30
"""Freed memory at the top of a heap beyond this is returned to the kernel."""

ARENAS = 1
"""Every thread allocates from the main arena, whose heap grows and trims as one."""

M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8
"""glibc's ``mallopt`` parameter numbers (malloc.h)."""

SWITCH = "BGBIAS_KEEP_FREED_MEMORY"
"""``0`` leaves glibc's malloc at its defaults (for a comparison, or a process that shares the allocator)."""

GLIBC_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_",
                  "MALLOC_ARENA_MAX")
"""Environment variables by which a user sets glibc's malloc: when any is set, bgbias leaves it as set."""


@functools.cache
def keep_freed_memory() -> str:
    """Once per process, glibc's malloc set to serve every block from one heap and keep 1 GiB freed at its
    top (module doc); says what was done: ``tuned``, or why the allocator was left as it is. Cheap to call
    again."""
    return tuned_or_why_not(os.environ)


def tuned_or_why_not(environment: Mapping[str, str]) -> str:
    """Tune glibc's malloc unless ``environment`` shows another choice; what was done (see above)."""
    reason = allocator_chosen_by_user(environment)
    if reason is not None:
        return f"left as set: {reason}"
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return "left as it is: not glibc"
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError as exc:
        return f"left as it is: glibc not loadable ({exc})"
    # mallopt returns 1 on success; a setting glibc refuses stays as it was, and the others still apply.
    settings = (("M_MMAP_MAX", M_MMAP_MAX, KERNEL_BLOCKS),
                ("M_TRIM_THRESHOLD", M_TRIM_THRESHOLD, TRIM_THRESHOLD),
                ("M_ARENA_MAX", M_ARENA_MAX, ARENAS))
    refused = [name for name, parameter, value in settings if libc.mallopt(parameter, value) != 1]
    if not refused:
        return "tuned"
    if len(refused) == len(settings):
        return "left as it is: glibc refused the settings"
    return f"partly tuned: glibc refused {', '.join(refused)}"


def allocator_chosen_by_user(environment: Mapping[str, str]) -> str | None:
    """The variables of ``environment`` that show the user chose how memory is allocated, or None."""
    if environment.get(SWITCH) == "0":
        return f"{SWITCH}=0"
    if "malloc" in environment.get("LD_PRELOAD", ""):  # jemalloc, tcmalloc, mimalloc
        return "LD_PRELOAD"
    if "glibc.malloc" in environment.get("GLIBC_TUNABLES", ""):
        return "GLIBC_TUNABLES"
    named = [name for name in GLIBC_SETTINGS if name in environment]
    return ", ".join(named) if named else None


def without_allocator_choices(environment: Mapping[str, str]) -> dict[str, str]:
    """``environment`` less every variable :func:`allocator_chosen_by_user` reads as a choice: for a child
    process whose allocator is to be decided by bgbias or by what the caller adds (tests, benchmarks)."""
    return {key: value for key, value in environment.items()
            if allocator_chosen_by_user({key: value}) is None}
