"""README.md: its quick starts run as written, on the tiny bench laid out as the README's first command,
``bgbias study``, leaves it, and every code block of the README and of the guides it links is marked as run
by a test or not run (with why)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from bgbias.cli import main
from bgbias.compat import import_torchvision
from bgbias.report.evaluation import load_evaluation_report
from bgbias.saliency.ground_truth import GROUND_TRUTH

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GUIDES = ("install", "datasets", "masks", "training", "evaluation", "models", "commands", "contributing",
          "status")
"""The docs pages that took over the README's sections (issue 35): their blocks follow the README's rule."""
TESTED = {"readme-audit-python", "readme-own-embeddings", "readme-bgaugment-loop"}
"""The README's blocks marked ``run``, each run by a test below."""

_FENCE = re.compile(r"^```")
_MARKER = re.compile(r"^<!-- (run: [a-z0-9-]+|not run: \S.*) -->$")


@pytest.fixture
def after_quick_study(study_folder) -> Path:
    """The working folder as ``bgbias study`` (the quick preset) leaves it: the bench in ``data/bench``, the
    pools, and the bench's exact masks where the study lays them out, ``masks/bench-ground-truth``; the
    default ``masks/bench`` (U²-Net's) is not there."""
    (study_folder / "masks" / "bench").rename(study_folder / "masks" / f"bench-{GROUND_TRUTH}")
    return study_folder


def block(run_id: str, page: Path = README) -> str:
    """The code of the fenced block directly below ``<!-- run: run_id -->`` on ``page``."""
    found = re.search(rf"^<!-- run: {re.escape(run_id)} -->\n```[a-z]*\n(.*?)^```", page.read_text("utf-8"),
                      re.M | re.S)
    assert found, f"{page.name}: no code block under <!-- run: {run_id} -->"
    return found.group(1)


def run_block(run_id: str, namespace: dict | None = None) -> dict:
    """Execute the README's block as written, in ``namespace``; returns the namespace."""
    import_torchvision()  # where torchvision needs the shim, the block's own import then finds it loaded
    namespace = {} if namespace is None else namespace
    exec(compile(block(run_id), f"README.md <!-- run: {run_id} -->", "exec"), namespace)
    return namespace


def opening_fences(page: Path) -> list[tuple[int, str]]:
    """(line number, the line above) of every opening fence of ``page``."""
    lines = page.read_text("utf-8").splitlines()
    fences = [number for number, line in enumerate(lines) if _FENCE.match(line)]
    return [(number + 1, lines[number - 1] if number else "") for number in fences[::2]]


@pytest.mark.parametrize("page", [README, *(ROOT / "docs" / f"{name}.md" for name in GUIDES)],
                         ids=lambda page: page.name)
def test_every_code_block_is_marked_run_or_not_run(page):
    unmarked = [number for number, above in opening_fences(page) if not _MARKER.match(above)]
    assert not unmarked, (f"{page.name}, the fences of lines {unmarked}: put <!-- run: ID --> (and a test "
                          f"that runs it) or <!-- not run: REASON --> on the line above each")


def test_the_readme_blocks_marked_run_are_the_ones_tested():
    marked = re.findall(r"^<!-- run: ([a-z0-9-]+) -->$", README.read_text("utf-8"), re.M)
    assert len(marked) == len(set(marked)), f"README.md: a run id twice in {marked}"
    assert set(marked) == TESTED


def test_the_python_audit_scores_a_model_on_clean_and_five_corrupted_sets(after_quick_study):
    done = run_block("readme-audit-python")
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


def run_shell_block(run_id: str, between: Callable[[], None]) -> None:
    """Run the README's shell block as written: each ``bgbias`` command in this process through the CLI, and,
    for a line that is only a comment (a step the reader does by hand, such as embedding images with their own
    model), ``between``."""
    for line in block(run_id).replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            between()
            continue
        assert words[0] == "bgbias", f"README.md <!-- run: {run_id} -->: {line!r} is not a bgbias command"
        ran = CliRunner().invoke(main, words[1:])
        assert ran.exit_code == 0, f"{line}\n{ran.output}\n{ran.exception!r}"


def test_the_own_embeddings_are_scored_without_the_model(after_quick_study):
    run_shell_block("readme-own-embeddings", between=_embed_rendered_sets)
    report = load_evaluation_report(after_quick_study / "emb" / "report" / "report.json")
    assert len(report.corrupted.repeats) == 5 and 0 <= report.clean.map_at_r <= 1


def test_the_bgaugment_loop_composites_every_batch_on_the_device(after_quick_study):
    done = run_block("readme-bgaugment-loop")
    pixels, composited = done["pixels"], done["composited"]
    assert composited.dtype == torch.float32 and composited.shape == pixels.shape
    assert composited.device.type == done["device"] and 0 <= composited.min() <= composited.max() <= 1
    assert not torch.equal(composited, pixels.to(composited) / 255)  # the backgrounds were replaced
