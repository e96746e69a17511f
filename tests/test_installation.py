"""The installation record (bgbias/installation.py) and the lock scripts/setup.sh installs from."""

from __future__ import annotations

import ast
import platform
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from bgbias.errors import AssetError
from bgbias.installation import (
    GPU_BUILDS,
    import_onnxruntime,
    installation,
    installation_differences,
    installation_digest,
    installed_requirements,
)

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements" / "linux-x86_64-py311.lock"
LOCKED_PLATFORM = (sys.platform == "linux" and platform.machine() == "x86_64"
                   and sys.implementation.name == "cpython" and sys.version_info[:2] == (3, 11))


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _lock_pins() -> dict[str, tuple[str, int]]:
    """name -> (version, number of hashes) of every entry of the lock."""
    pins: dict[str, tuple[str, int]] = {}
    text = LOCK.read_text(encoding="utf-8")
    for entry in re.split(r"\n(?=[A-Za-z0-9])", text):
        head = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", entry)
        if head:
            pins[_canonical(head.group(1))] = (head.group(2), entry.count("--hash=sha256:"))
    return pins


def test_the_record_reaches_bgbias_requirements_and_leaves_out_its_tooling():
    try:
        metadata.distribution("bgbias")
    except metadata.PackageNotFoundError:
        pytest.skip("bgbias runs from a source tree here, not installed: every distribution is recorded")
    packages = installed_requirements()
    for name in ("torch", "torchvision", "numpy", "pillow", "opencv-python-headless", "albumentations",
                 "pytorch-metric-learning", "rembg"):
        assert packages[name] == metadata.version(name)
    for backend in ("onnxruntime", "faiss-cpu"):  # a backend changes numbers
        assert backend in packages
    assert "pytest" not in packages and "ruff" not in packages  # bgbias[dev] only builds and tests
    assert "submitit" not in packages  # bgbias[slurm] only submits


def test_a_requirement_whose_marker_does_not_hold_here_is_not_followed(monkeypatch):
    """triton asks for ``importlib-metadata; python_version < "3.10"``; setuptools vendors a distribution of
    that name, found once its vendored folder is on ``sys.path`` (after some import of setuptools), and the
    record then named a package no requirement of this Python reaches."""
    import setuptools

    vendored = Path(setuptools.__file__).parent / "_vendor"
    monkeypatch.syspath_prepend(str(vendored))
    assert metadata.distribution("importlib-metadata")  # found: the marker is what must leave it out
    assert "importlib-metadata" not in installed_requirements()


OPTIONAL_IMPORTS = {"compression", "zstandard", "submitit", "pyarrow", "timm"}
"""Imported only where present, with an error naming the fix otherwise: zstd for Debian archives
(bgbias/assets/debian.py), from Python 3.14's standard library or the zstandard package; submitit for
``bgbias study --executor slurm`` (bgbias/study/slurm.py), the slurm extra; pyarrow for Parquet files of
embeddings (bgbias/measurement/embedding_files.py, docs/embeddings.md); timm for
``ModelInput.from_timm``, which reads a timm model's ``pretrained_cfg`` itself where timm is absent
(bgbias/models/model_input.py)."""


@pytest.mark.slow
def test_every_package_bgbias_imports_is_a_requirement():
    """A package bgbias imports but does not declare comes only while another requirement happens to pull it
    in (pydantic came through albumentations): a user's install would break when that one changes."""
    imported: dict[str, set[str]] = {}
    for path in (REPO / "bgbias").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                imported.setdefault(name.partition(".")[0], set()).add(str(path.relative_to(REPO)))
    third_party = set(imported) - set(sys.stdlib_module_names) - {"bgbias"} - OPTIONAL_IMPORTS
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = {_canonical(Requirement(text).name) for text in project["dependencies"]} | set(GPU_BUILDS)
    providers = metadata.packages_distributions()
    for module in sorted(third_party):
        distributions = {_canonical(name) for name in providers.get(module, [])}
        importers = ", ".join(sorted(imported[module]))
        assert distributions & declared, (
            f"{importers} import {module} (from {', '.join(distributions) or '?'}), which pyproject.toml's "
            "dependencies do not name")


class _Distribution:
    def __init__(self, version: str, requires: list[str]):
        self.version, self.requires = version, requires


def test_a_gpu_build_that_replaced_a_cpu_backend_is_recorded(monkeypatch):
    """A CUDA machine swaps onnxruntime for onnxruntime-gpu, which no requirement names: it counts all the
    same (another backend, other numbers)."""
    installed = {"bgbias": _Distribution("0.1.0", ["onnxruntime>=1.16", "faiss-cpu>=1.7.4"]),
                 "faiss-cpu": _Distribution("1.15.1", ["numpy"]), "numpy": _Distribution("2.4.6", []),
                 "onnxruntime-gpu": _Distribution("1.32.0", ["numpy", 'coloredlogs; extra == "x"'])}

    def distribution(name):
        if name not in installed:
            raise metadata.PackageNotFoundError(name)
        return installed[name]

    monkeypatch.setattr(metadata, "distribution", distribution)
    assert installed_requirements() == {"bgbias": "0.1.0", "faiss-cpu": "1.15.1", "numpy": "2.4.6",
                                        "onnxruntime-gpu": "1.32.0"}


def test_an_extra_that_cannot_change_a_figure_is_not_recorded(monkeypatch):
    """submitit (bgbias[slurm]) only submits the work, as pytest (bgbias[dev]) only tests it; TensorBoard
    (bgbias[tensorboard]) runs inside training, and counts."""
    installed = {"bgbias": _Distribution("0.1.0", ["numpy", 'submitit<1.6,>=1.5; extra == "slurm"',
                                                   'tensorboard>=2.14; extra == "tensorboard"',
                                                   'pytest>=8; extra == "dev"']),
                 "numpy": _Distribution("2.4.6", []), "submitit": _Distribution("1.5.4", []),
                 "tensorboard": _Distribution("2.21.0", []), "pytest": _Distribution("9.0.0", [])}

    def distribution(name):
        if name not in installed:
            raise metadata.PackageNotFoundError(name)
        return installed[name]

    monkeypatch.setattr(metadata, "distribution", distribution)
    assert installed_requirements() == {"bgbias": "0.1.0", "numpy": "2.4.6", "tensorboard": "2.21.0"}


def test_without_onnxruntime_the_error_names_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # makes `import onnxruntime` raise ImportError
    with pytest.raises(AssetError) as caught:
        import_onnxruntime()
    assert "pip install onnxruntime" in caught.value.fix and "onnxruntime-gpu" in caught.value.fix
    assert "only to run masks on onnxruntime or an ONNX model on a GPU" in caught.value.fix


def test_without_bgbias_installed_every_distribution_is_recorded():
    """Run from a source tree (PYTHONPATH), its requirements are unknown: more is recorded, never less."""
    packages = installed_requirements("no-such-distribution-of-bgbias")
    assert packages["pytest"] == metadata.version("pytest") and packages["numpy"] == metadata.version("numpy")


def test_the_digest_pins_python_platform_and_every_version():
    record = installation()
    assert record["digest"] == installation_digest(record)
    bumped = {**record, "packages": {**record["packages"], "numpy": "0.0.1"}}
    assert installation_digest(bumped) != record["digest"]
    assert installation_digest({**record, "python": "cpython 3.99.0"}) != record["digest"]
    assert installation_digest({**record, "processor": "Intel Xeon, AVX2"}) != record["digest"]


def test_differences_name_each_package_that_differs_and_the_results_of_each_version():
    base = {"python": "cpython 3.11.7", "platform": "linux-x86_64", "processor": "AMD EPYC, AVX512",
            "packages": {"numpy": "2.4.6", "torch": "2.13.0"}}
    newer = {**base, "packages": {"numpy": "2.5.0", "torch": "2.13.0", "pillow": "13.0.0"}}
    assert installation_differences({"a": base, "b": dict(base)}) == []
    assert installation_differences({"a": base, "x": {**base, "processor": "Intel Xeon, AVX2"}}) == [
        "processor: AMD EPYC, AVX512 (a); Intel Xeon, AVX2 (x)"]
    lines = installation_differences({"a": base, "b": base, "c": newer, "old": None})
    assert lines == [
        "numpy: 2.4.6 (a, b); 2.5.0 (c)",
        "pillow: 13.0.0 (c); not installed (a, b)",
        "not recorded (the result's record is missing or damaged): old",
    ]


def test_the_lock_pins_every_requirement_within_its_range_with_hashes():
    pins = _lock_pins()
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = list(project["dependencies"])
    for requirements in project["optional-dependencies"].values():
        wanted += [r for r in requirements if not r.startswith("bgbias")]
    wanted += [line for line in (REPO / "requirements" / "build.in").read_text().splitlines()
               if line and not line.startswith("#")]
    wanted += [line for line in (REPO / "constraints-dev.txt").read_text().splitlines()
               if line and not line.startswith("#")]
    for text in wanted:
        requirement = Requirement(text)
        name = _canonical(requirement.name)
        assert name in pins, f"{name} is not in {LOCK.name}: run scripts/lock.sh"
        version, hashes = pins[name]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{LOCK.name} pins {name}=={version}, outside {requirement}: run scripts/lock.sh")
        assert hashes >= 1, f"{name} has no hash in {LOCK.name}"


@pytest.mark.skipif(not LOCKED_PLATFORM, reason="the lock is for Linux x86-64 and CPython 3.11")
def test_this_environment_is_the_lock():
    """The set-up installed exactly the lock (a stale .venv from before the lock: run scripts/setup.sh)."""
    pins = _lock_pins()
    installed = {_canonical(d.metadata["Name"]): d.version for d in metadata.distributions()}
    for name, version in installed_requirements().items():
        if name != "bgbias":
            assert pins[name][0] == version, f"{name} {version} is installed, the lock says {pins[name][0]}"
    for name in ("pytest", "ruff", "pip", "setuptools"):
        assert installed[name] == pins[name][0]
