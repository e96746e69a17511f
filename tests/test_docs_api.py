"""docs/api.md: its examples run as written, in order, from a folder laid out as `bgbias study` leaves it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import bgbias
from tests.docs_blocks import CodeBlock, code_block


def fast_examples() -> list[CodeBlock]:
    """The page's examples up to its masks one, in the page's order (each builds on the ones before)."""
    return [
        code_block("docs/api.md", "api-bgaugment-batch"),
        code_block("docs/api.md", "api-bgaugment-workers"),
        code_block("docs/api.md", "api-bgaugment-replay"),
        code_block("docs/api.md", "api-audit-model"),
        code_block("docs/api.md", "api-audit-torchscript"),
        code_block("docs/api.md", "api-audit-profile"),
        code_block("docs/api.md", "api-own-images"),
        code_block("docs/api.md", "api-explain"),
        code_block("docs/api.md", "api-input-conventions"),
        code_block("docs/api.md", "api-score-embeddings"),
        code_block("docs/api.md", "api-compare"),
    ]


def run_examples(blocks: list[CodeBlock], namespace: dict | None = None) -> dict:
    """The names the blocks left, run one after the other in ``namespace`` (a fresh one by default)."""
    namespace = {} if namespace is None else namespace
    for block in blocks:
        exec(compile(block.text, f"{block.page}:{block.line}", "exec"), namespace)
    return namespace


@pytest.mark.slow
def test_the_examples_run_and_do_what_the_page_says(study_folder):
    blocks = fast_examples()
    assert [block.line for block in blocks] == sorted(block.line for block in blocks)
    done = run_examples(blocks)
    assert done["composited"].dtype == torch.float32 and done["composited"].shape == done["pixels"].shape
    device = done["device"].type
    assert done["composited"].device.type == done["bgaugment"].background_pixels.device.type == device
    in_workers = done["composited_in_workers"]
    assert in_workers.dtype == torch.float32 and in_workers.shape == done["pixels"].shape
    assert len(done["params"].crops) == len(done["params"].apply) == 8
    assert torch.equal(done["replayed"], done["drawn"])
    assert 0 <= done["clean_map"] <= 1 and 0 <= done["corrupted_map"] <= 1
    assert (study_folder / "runs" / "external" / "mobilenet" / "model.json").is_file()
    assert done["gap"].repeats == 2 and -1 <= done["gap"].mean.map_at_r <= 1
    report = done["result"].report
    assert report.dataset == "toy" and len(report.corrupted.repeats) == 3
    assert not (study_folder / "corrupted").exists()  # made in memory: no call named a manifests folder
    mine, kept = done["mine"], done["kept"]
    assert mine.out_dir is None and len(done["table"]["id"]) == len(done["rows"]) == 12  # 3 classes of 4
    assert kept.report.clean == mine.report.clean and (kept.out_dir / "report.json").is_file()
    assert kept.out_dir.parent == Path("reports/mine/eval")
    change = done["found"].metrics["map_at_r"].corrupted  # noisier corrupted embeddings: a lower score
    assert change.difference.high < 0 and change.p_value < 0.05 and done["found"].queries == 50
    explained = done["explained"]
    assert explained.out_dir is None and len(explained.scores) == len(explained.maps) == 4
    assert done["heat"].dtype == np.float32 and 0 <= explained.summary["mean"] <= 1
    assert done["timm_input"] == bgbias.ModelInput(input_size=224, resize=235, interpolation="bicubic")
    assert done["audited"].report.geometry == {"resize": 235, "crop": 224, "interpolation": "bicubic"}
    manifest = Path(done["audited"].report.corrupted_sets["manifests"][0]["path"])
    assert manifest.parent.name == "seed-0-resize235-crop224-bicubic"
    assert (done["tv_input"].input_size, done["tv_input"].resize) == (224, 256)
    assert done["batch"].shape == (2, 3, 224, 224)
    assert 0 < done["scores"].map_at_r <= 1


@pytest.mark.slow
def test_the_masks_example_runs(study_folder, tmp_path_factory, monkeypatch):
    from tests.u2netp import provide_u2netp

    monkeypatch.setenv("U2NET_HOME", str(provide_u2netp(tmp_path_factory.mktemp("home")).parent))
    done = run_examples([code_block("docs/api.md", "api-masks-corrupted")], {"bgbias": bgbias})
    assert done["run"].failed == 0
    assert [path.name for path in done["made"]["random-bg"]] == ["repeat-0.json", "repeat-1.json"]
    assert [path.name for path in done["made"]["only-fg"]] == ["repeat-0.json"]
    assert (study_folder / "corrupted-images" / "gallery.png").is_file()
    assert (study_folder / "corrupted-images" / "variants.png").is_file()
