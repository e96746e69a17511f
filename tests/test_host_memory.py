"""The host allocator kept from faulting in fresh pages for every layer's buffers (bgbias.host_memory)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from bgbias import host_memory
from bgbias.engine import device as device_module

glibc_only = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                                reason="glibc's malloc is what is tuned")


class RecordingLibc:
    """Stands in for libc: records each ``mallopt`` and answers ``answer`` (1 is glibc's success), 0 for the
    parameters in ``refusing``."""

    def __init__(self, answer: int = 1, refusing: tuple[int, ...] = ()):
        self.answer = answer
        self.refusing = refusing
        self.calls: list[tuple[int, int]] = []

    def mallopt(self, parameter: int, value: int) -> int:
        self.calls.append((parameter, value))
        return 0 if parameter in self.refusing else self.answer


@pytest.mark.parametrize(("environment", "named"), [
    ({"BGBIAS_KEEP_FREED_MEMORY": "0"}, "BGBIAS_KEEP_FREED_MEMORY=0"),
    ({"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"}, "LD_PRELOAD"),
    ({"LD_PRELOAD": "libtcmalloc_minimal.so.4"}, "LD_PRELOAD"),
    ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, "GLIBC_TUNABLES"),
    ({"MALLOC_ARENA_MAX": "4"}, "MALLOC_ARENA_MAX"),
    ({"MALLOC_TOP_PAD_": "131072", "MALLOC_TRIM_THRESHOLD_": "0"}, "MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_"),
])
def test_a_users_own_allocator_settings_are_left_as_set(monkeypatch, environment, named):
    libc = RecordingLibc()
    monkeypatch.setattr(host_memory.ctypes, "CDLL", lambda name: libc)
    assert host_memory.tuned_or_why_not(environment) == f"left as set: {named}"
    assert libc.calls == []


@pytest.mark.parametrize("environment", [{}, {"LD_PRELOAD": "libfaketime.so.1"},
                                         {"BGBIAS_KEEP_FREED_MEMORY": "1"},
                                         {"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX512F"}])
def test_settings_that_do_not_choose_an_allocator_are_not_a_choice(environment):
    assert host_memory.allocator_chosen_by_user(environment) is None


@glibc_only
def test_glibc_is_set_to_keep_freed_buffers_in_one_arena(monkeypatch):
    libc = RecordingLibc()
    monkeypatch.setattr(host_memory.ctypes, "CDLL", lambda name: libc)
    assert host_memory.tuned_or_why_not({}) == "tuned"
    assert libc.calls == [(-4, 0), (-1, 1 << 30), (-8, 1)]


@glibc_only
def test_a_setting_glibc_refuses_is_said(monkeypatch):
    monkeypatch.setattr(host_memory.ctypes, "CDLL", lambda name: RecordingLibc(answer=0))
    assert host_memory.tuned_or_why_not({}) == "left as it is: glibc refused the settings"


@glibc_only
def test_a_setting_glibc_refuses_does_not_keep_the_others_from_applying(monkeypatch):
    libc = RecordingLibc(refusing=(host_memory.M_MMAP_MAX,))
    monkeypatch.setattr(host_memory.ctypes, "CDLL", lambda name: libc)
    assert host_memory.tuned_or_why_not({}) == "partly tuned: glibc refused M_MMAP_MAX"
    assert libc.calls == [(-4, 0), (-1, 1 << 30), (-8, 1)]


def test_every_run_that_settles_its_device_keeps_freed_memory(monkeypatch):
    calls = []
    monkeypatch.setattr(device_module, "keep_freed_memory", lambda: calls.append(1) or "tuned")
    device_module.resolve_device("cpu")
    assert calls == [1]


GLIBC_DEFAULTS = {host_memory.SWITCH: "0"}
"""The child keeps glibc's defaults."""

PAGE_FAULTS = """
import json, resource, sys, threading
import numpy as np
from bgbias.host_memory import keep_freed_memory
outcome = keep_freed_memory()
def layers():
    for _ in range(60):  # a network's buffers: made, written, freed, layer after layer
        buffers = [np.ones(1 << 20) for _ in range(3)]  # 8 MiB each
        del buffers
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
worker = threading.Thread(target=layers)  # a thread of its own, as the masks step's network streams
worker.start()
worker.join()
print(json.dumps({"outcome": outcome, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


def _child(code: str, extra_environment: dict[str, str]) -> dict:
    """What a child Python running ``code`` printed (one JSON line), its allocator settings only
    ``extra_environment``'s."""
    environment = {**host_memory.without_allocator_choices(os.environ), **extra_environment}
    done = subprocess.run([sys.executable, "-c", code], env=environment,
                          capture_output=True, text=True, timeout=300, check=True)
    return json.loads(done.stdout)


@glibc_only
def test_tuned_buffers_reuse_their_pages_where_glibc_faults_them_in_again():
    untuned = _child(PAGE_FAULTS, GLIBC_DEFAULTS)
    tuned = _child(PAGE_FAULTS, {})
    assert untuned["outcome"] == "left as set: BGBIAS_KEEP_FREED_MEMORY=0"
    assert tuned["outcome"] == "tuned"
    # 180 buffers of 2,048 pages: glibc's defaults fault a quarter of them in afresh (about 93,000 pages
    # here), kept in the heap only the first three buffers' (about 1,500).
    assert untuned["faults"] > 40_000
    assert tuned["faults"] < untuned["faults"] / 10


SAME_BYTES = """
import hashlib, json
import torch
from bgbias.engine.device import resolve_device
from bgbias.host_memory import keep_freed_memory
device = resolve_device("cpu")
torch.manual_seed(0)
nn = torch.nn
network = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
                        nn.Conv2d(32, 64, 3, padding=2, dilation=2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(64, 16))
images = torch.rand(8, 3, 96, 96)
loss = network(images).square().mean()
loss.backward()
digest = hashlib.sha256()
for tensor in (loss.detach(), *(parameter.grad for parameter in network.parameters())):
    digest.update(tensor.numpy().tobytes())
print(json.dumps({"outcome": keep_freed_memory(), "sha256": digest.hexdigest()}))
"""


@glibc_only
@pytest.mark.slow
def test_where_the_bytes_live_changes_no_result():
    runs = [_child(SAME_BYTES, extra) for extra in ({}, GLIBC_DEFAULTS)]
    assert [run["outcome"] for run in runs] == ["tuned", "left as set: BGBIAS_KEEP_FREED_MEMORY=0"]
    assert runs[0]["sha256"] == runs[1]["sha256"]


def test_a_childs_environment_loses_exactly_the_allocator_choices():
    environment = {"PATH": "/usr/bin", "LD_PRELOAD": "libjemalloc.so.2", "MALLOC_ARENA_MAX": "2",
                   "GLIBC_TUNABLES": "glibc.malloc.arena_max=2", "BGBIAS_KEEP_FREED_MEMORY": "0",
                   "BGBIAS_DATA": "/data"}
    assert host_memory.without_allocator_choices(environment) == {"PATH": "/usr/bin", "BGBIAS_DATA": "/data"}
    kept = {"LD_PRELOAD": "libfaketime.so.1", "GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX512F"}
    assert host_memory.without_allocator_choices(kept) == kept
