"""README.md: its quick starts run as written, on the tiny bench laid out as the README's first command,
``bgbias study``, leaves it (tests/test_docs_code_blocks.py checks that every block is marked run or not)."""

from __future__ import annotations

import shlex
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from bgbias.cli import main
from bgbias.report.evaluation import load_evaluation_report
from bgbias.saliency.ground_truth import GROUND_TRUTH
from tests.docs_blocks import CodeBlock, code_block


@pytest.fixture
def after_quick_study(study_folder) -> Path:
    """The working folder as ``bgbias study`` (the quick preset) leaves it: the bench in ``data/bench``, the
    pools, and the bench's exact masks where the study lays them out, ``masks/bench-ground-truth``; the
    default ``masks/bench`` (U²-Net's) is not there."""
    (study_folder / "masks" / "bench").rename(study_folder / "masks" / f"bench-{GROUND_TRUTH}")
    return study_folder


def run_python_block(block: CodeBlock) -> dict:
    """Execute a Python block of the README as written; returns its namespace. Its imports are first run in
    a fresh interpreter, as a reader's would be (in this one, the suite has imported much already)."""
    imports = "\n".join(line for line in block.text.splitlines() if line.startswith(("import ", "from ")))
    fresh = subprocess.run([sys.executable, "-c", imports], capture_output=True, text=True, timeout=120)
    assert fresh.returncode == 0, f"{block.page}:{block.line}: its imports fail:\n{fresh.stderr}"
    namespace: dict = {}
    exec(compile(block.text, f"{block.page}:{block.line}", "exec"), namespace)
    return namespace


@pytest.mark.slow
def test_the_python_audit_scores_a_model_on_clean_and_five_corrupted_sets(after_quick_study):
    done = run_python_block(code_block("README.md", "readme-audit-python"))
    report = done["result"].report
    assert len(report.corrupted.repeats) == 5 and 0 <= report.clean.map_at_r <= 1
    assert done["relative_drop"] == report.drop["map_at_r"].relative
    assert done["result"].out_dir is None and not (after_quick_study / "runs").exists()  # it wrote nothing


def _embed_rendered_sets() -> None:
    """What a user does between ``bgbias corrupt --render`` and ``bgbias score``: embed the rendered sets and
    the split's own images with their own model (here the colours of a thumbnail) into ``emb/``."""

    def save(name: str, ids: list[str], paths: list[Path]) -> None:
        embeddings = np.stack([np.asarray(Image.open(path).convert("RGB").resize((8, 8)), np.float32).ravel()
                               for path in paths])
        Path("emb").mkdir(exist_ok=True)
        np.savez(Path("emb", f"{name}.npz"), ids=np.array(ids), embeddings=embeddings)

    for folder in sorted(Path("rendered").glob("repeat-*")):
        pngs = sorted(folder.rglob("*.png"))
        save(folder.name, [png.relative_to(folder).with_suffix("").as_posix() for png in pngs], pngs)
    ids = [png.relative_to("rendered/repeat-0").with_suffix("").as_posix()
           for png in sorted(Path("rendered/repeat-0").rglob("*.png"))]
    save("clean", ids, [next(Path("data/bench").glob(image_id + ".*")) for image_id in ids])


def run_shell_block(block: CodeBlock, between: Callable[[], None]) -> None:
    """Run a shell block of the README as written: each ``bgbias`` command in this process through the CLI,
    and, for a line that is only a comment (a step the reader does by hand, such as embedding images with
    their own model), ``between``."""
    for number, line in block.lines():
        words = shlex.split(line, comments=True)
        if not words:
            between()
            continue
        assert words[0] == "bgbias", f"{block.page}:{number}: {line!r} is not a bgbias command"
        ran = CliRunner().invoke(main, words[1:])
        assert ran.exit_code == 0, f"{block.page}:{number}: {line}\n{ran.output}\n{ran.exception!r}"


@pytest.mark.slow
def test_the_own_embeddings_are_scored_without_the_model(after_quick_study):
    run_shell_block(code_block("README.md", "readme-own-embeddings"), between=_embed_rendered_sets)
    report = load_evaluation_report(after_quick_study / "emb" / "report" / "report.json")
    assert len(report.corrupted.repeats) == 5 and 0 <= report.clean.map_at_r <= 1


@pytest.mark.slow
def test_the_bgaugment_loop_composites_every_batch_on_the_device(after_quick_study):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        done = run_python_block(code_block("README.md", "readme-bgaugment-loop"))
    # The loader asks for no more workers than a 2-core machine (the slower development kind) has: torch
    # warns that 4 is more than its suggested maximum there.
    assert not [str(w.message) for w in caught if "worker" in str(w.message)]
    pixels, composited = done["pixels"], done["composited"]
    assert composited.dtype == torch.float32 and composited.shape == pixels.shape
    assert composited.device.type == done["device"] and 0 <= composited.min() <= composited.max() <= 1
    assert not torch.equal(composited, pixels.to(composited) / 255)  # the backgrounds were replaced
