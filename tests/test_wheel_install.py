"""A user's install (issue 30 item 6): the wheel built from this checkout (through its sdist), installed with
nothing but its declared requirements into a clean virtual environment, runs the README's commands from a
folder outside any checkout, and writes where docs/install.md's *Where files go* says: what commands make into
the working folder, assets into ``$BGBIAS_HOME``. And a release's two files (issue 35 item 5): the sdist holds
everything a build needs, the wheel built from it (what ``pip install`` of the sdist builds) is the one
installed, and it holds the same files, byte for byte, as the wheel built from the checkout.

The requirements are the wheel's declared ones and what they need in turn, no more: found from the wheel's
metadata and the installed packages' (this environment is the lock: tests/test_installation.py), and linked
in from the environment running the tests, which installed the same locked files, instead of being
downloaded and unpacked again (torch's CUDA libraries alone are about 4 GB); pip installs the wheel itself
and checks them all (`pip check`), and a requirement the wheel forgets is missing here. Unpacking them took
5 min 21 s on the 2-core AVX2 machine while other tests ran; linking only torch's, 135 s (2026-11-28).
Building the sdist and both wheels takes about 2 s of that."""

from __future__ import annotations

import email
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.replicas import make_bench
from tests.u2netp import provide_u2netp

REPO = Path(__file__).resolve().parents[1]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
RELEASE_FILES = ("pyproject.toml", "MANIFEST.in", "README.md", "LICENSE", "CHANGELOG.md")
"""The checkout's top-level files a release is built from (besides the package)."""
TINY_TRAINING = ("--backbone", "tiny_cnn", "--epochs", "1", "--set", "model.pretrained=false",
                 "--set", "model.embedding_dim=16", "--set", "data.batch_size=8",
                 "--set", "data.m_per_class=2", "--set", "data.workers=0", "--set", "data.crop=32")
CHECKOUT_VARIABLES = frozenset({"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "BGBIAS_HOME", "BGBIAS_DATA",
                                "U2NET_HOME"})


def _run(args: list[str | os.PathLike[str]], **options) -> subprocess.CompletedProcess[str]:
    """Run a command; a failure shows its whole output."""
    command = [os.fspath(arg) for arg in args]
    done = subprocess.run(command, capture_output=True, text=True, check=False, **options)
    assert done.returncode == 0, f"{' '.join(command)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def _install_wheel(base: Path) -> Path:
    """A clean virtual environment (no system site packages) in ``base``, holding the wheel and its
    requirements."""
    wheel = _build_release(base)
    _run([sys.executable, "-m", "venv", "--without-pip", base / "venv"])
    python = base / "venv" / "bin" / "python"
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    _link_distributions(_requirements_of(wheel), Path(_run([python, "-c", purelib]).stdout.strip()))
    _run([*_pip(base / "venv"), "install", "--quiet", "--no-deps", "--no-index", wheel], env=_clean_env())
    _run([*_pip(base / "venv"), "check"])
    return base / "venv"


def _pip(venv: Path) -> list[str | os.PathLike[str]]:
    """This environment's pip, working on ``venv``'s packages: a venv made with pip of its own spent a minute
    unpacking it (ensurepip) on the 2-core machine while other tests ran."""
    return [sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "--disable-pip-version-check"]


def _requirements_of(wheel: Path) -> list[metadata.Distribution]:
    """The installed distributions that the wheel's declared requirements (its extras left out) need, and
    theirs in turn: what pip would install for it, at this environment's versions."""
    with zipfile.ZipFile(wheel) as archive:
        (name,) = (name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
        declared = email.message_from_bytes(archive.read(name)).get_all("Requires-Dist") or []
    installed = {canonicalize_name(dist.metadata["Name"]): dist for dist in metadata.distributions()}
    needed: dict[str, metadata.Distribution] = {}
    seen: set[tuple[str, str]] = set()
    pending = [(Requirement(line), "") for line in declared]  # (requirement, the extra it is listed under)
    while pending:
        requirement, extra = pending.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        key = canonicalize_name(requirement.name)
        assert key in installed, f"{requirement}, which the wheel needs, is not installed (scripts/setup.sh)"
        needed[key] = installed[key]
        for wanted in ("", *requirement.extras):
            if (key, wanted) not in seen:
                seen.add((key, wanted))
                pending += [(Requirement(line), wanted) for line in installed[key].requires or ()]
    return list(needed.values())


def _link_distributions(distributions: list[metadata.Distribution], site_packages: Path) -> None:
    """Hard-link (or copy, across file systems) the files of ``distributions``, their metadata included, into
    ``site_packages``, so that pip finds them installed; scripts outside it are left out."""
    for dist in distributions:
        for file in dist.files or ():
            if file.parts[0] == "..":
                continue
            source, target = Path(dist.locate_file(file)), site_packages / file
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(source, target)
            except OSError:
                shutil.copy2(source, target)


def _build_release(base: Path) -> Path:
    """Build the sdist and, from it, the wheel, both with setuptools' own build hooks and without build
    isolation (the locked setuptools builds them, as in scripts/setup.sh); check the sdist's files and that
    the checkout builds the same wheel. Returns the wheel built from the sdist."""
    source = base / "source"  # a copy, so that building leaves no build/ or egg-info in the checkout
    source.mkdir(parents=True)
    for name in RELEASE_FILES:
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "bgbias", source / "bgbias", ignore=shutil.ignore_patterns("__pycache__"))
    _run([sys.executable, "-c", f"from setuptools import build_meta; build_meta.build_sdist({str(base)!r})"],
         cwd=source)
    sdist = base / f"bgbias-{VERSION}.tar.gz"
    with tarfile.open(sdist) as archive:
        held = {Path(name).relative_to(f"bgbias-{VERSION}").as_posix() for name in archive.getnames()}
        archive.extractall(base / "unpacked", filter="data")
    configs = (REPO / "bgbias" / "configs").rglob("*.json")
    package_data = {path.relative_to(REPO).as_posix() for path in configs}
    missing = (package_data | set(RELEASE_FILES)) - held
    assert package_data and not missing, f"the sdist lacks {sorted(missing)}"
    assert not any(name.startswith("tests") for name in held)  # MANIFEST.in prunes the half copy

    def build_wheel(tree: Path, into: Path) -> Path:
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
              "--disable-pip-version-check", "-w", into, tree])
        (wheel,) = into.glob(f"bgbias-{VERSION}-*.whl")
        return wheel

    from_sdist = build_wheel(base / "unpacked" / f"bgbias-{VERSION}", base / "from-sdist")
    from_checkout = build_wheel(source, base / "from-checkout")
    built, rebuilt = _contents(from_sdist), _contents(from_checkout)
    differing = sorted(name for name in built.keys() | rebuilt.keys() if built.get(name) != rebuilt.get(name))
    assert not differing, f"the wheels built from the sdist and from the checkout differ in {differing}"
    assert package_data <= set(built), f"the wheel lacks {sorted(package_data - set(built))}"
    return from_sdist


def _contents(wheel: Path) -> dict[str, bytes]:
    """Every file of a wheel, by name."""
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what points Python or bgbias at the checkout's folders."""
    return {**{name: value for name, value in os.environ.items() if name not in CHECKOUT_VARIABLES}, **extra}


@pytest.mark.slow
def test_the_sdist_holds_what_a_build_needs_and_builds_the_checkouts_wheel(tmp_path):
    """The release's files, without installing them: quick, and on any platform."""
    assert zipfile.is_zipfile(_build_release(tmp_path))


@pytest.mark.slow  # links torch and the rest into a fresh environment
def test_the_wheel_alone_runs_the_readme_commands_outside_a_checkout(tmp_path):
    """One test, so that one process pays for the installation (pytest-xdist shares no fixture)."""
    venv = _install_wheel(tmp_path / "install")
    listed = json.loads(_run([*_pip(venv), "list", "--format", "json"]).stdout)
    names = {package["name"].lower() for package in listed}
    assert {"bgbias", "onnx", "onnxruntime", "faiss-cpu", "rembg", "platformdirs", "torch"} <= names
    assert not names & {"pytest", "ruff", "tensorboard"}  # extras stay extras

    project, home = tmp_path / "project", tmp_path / "bgbias-home"
    project.mkdir()
    (home / "u2net").mkdir(parents=True)
    shutil.copy2(provide_u2netp(tmp_path / "fetched"), home / "u2net" / "u2netp.onnx")
    make_bench(project / "data" / "bench", train_classes=4, val_classes=2, test_classes=3, per_class=2)
    path = f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"
    env = _clean_env(PATH=path, BGBIAS_HOME=str(home))

    def bgbias(*args: str) -> str:
        return _run(["bgbias", *args], cwd=project, env=env).stdout

    assert "Usage: bgbias" in bgbias("--help")
    assert bgbias("--version") == f"bgbias {VERSION}\n"
    assert "triplet" in bgbias("methods")
    assert str(home / "u2net" / "u2netp.onnx") in bgbias("assets", "status")
    # The torch backend, its weights read by onnx; the default on the CPU is onnxruntime, run next.
    bgbias("masks", "--dataset", "bench", "--model", "u2netp", "--device", "cpu", "--backend", "torch")
    manifest = json.loads((project / "masks" / "bench" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["counts"]["masks"] == 18 and manifest["inference"]["backend"] == "torch"
    bgbias("masks", "--dataset", "bench", "--model", "u2netp", "--device", "cpu", "--backend", "onnxruntime",
           "--out", "masks/bench-onnxruntime")
    manifest = json.loads((project / "masks" / "bench-onnxruntime" / "manifest.json").read_text("utf-8"))
    assert manifest["counts"]["masks"] == 18 and manifest["producer"]["onnxruntime"] != "unknown"
    bgbias("train", "--method", "triplet", "--dataset", "bench", *TINY_TRAINING)  # faiss, for validation
    bgbias("eval")
    (report,) = (project / "runs").glob("bench-triplet-seed0-*/eval/bench-test/report.json")
    packages = json.loads(report.read_text(encoding="utf-8"))["installation"]["packages"]
    assert {"onnxruntime", "faiss-cpu"} <= set(packages)

    # bgbias itself is the installed wheel's, and its faiss backend answers.
    code = ("import bgbias, numpy\n"
            "from bgbias.retrieval.search import faiss_ranking\n"
            "print(bgbias.__file__)\n"
            "print(faiss_ranking(numpy.array([[0, 0], [0, 1], [5, 5]], 'float32'), 1).indices.tolist())\n")
    where, neighbours = _run([venv / "bin" / "python", "-c", code], cwd=project, env=env).stdout.splitlines()
    assert Path(where).is_relative_to(venv) and neighbours == "[[1], [0], [1]]"
    assert sorted(p.name for p in project.iterdir()) == ["data", "masks", "runs"]

    # Without $BGBIAS_HOME, assets go to the user cache folder: on Linux (the locked platform), XDG's.
    cache = tmp_path / "xdg-cache"
    status = _run(["bgbias", "assets", "status"], cwd=project,
                  env=_clean_env(PATH=path, XDG_CACHE_HOME=str(cache))).stdout
    assert str(cache / "bgbias" / "u2net" / "u2netp.onnx") in status
