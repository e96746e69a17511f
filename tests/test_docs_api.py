"""docs/api.md: its examples run as written, in order, from a folder laid out as `bgbias study` leaves it."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

import bgbias
from bgbias.compat import import_torchvision
from bgbias.errors import AssetError

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"
_BLOCK = re.compile(r"(<!-- slow -->\n)?```python\n(.*?)```", re.S)


def examples(slow: bool) -> list[str]:
    """The Python blocks of the page, those marked ``<!-- slow -->`` or the others."""
    return [code for marker, code in _BLOCK.findall(DOC.read_text(encoding="utf-8")) if bool(marker) == slow]


def run_examples(codes: list[str]) -> dict:
    import_torchvision()  # where torchvision needs the shim, the examples' own import then finds it loaded
    namespace: dict = {}
    for code in codes:
        exec(compile(code, str(DOC), "exec"), namespace)
    return namespace


def test_the_examples_run_and_do_what_the_page_says(study_folder):
    assert len(examples(slow=False)) == 10
    done = run_examples(examples(slow=False))
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
    assert mine.out_dir is None and len(done["table"]["id"]) == len(done["rows"]) == 36  # the tiny bench's
    assert kept.report.clean == mine.report.clean and (kept.out_dir / "report.json").is_file()
    assert kept.out_dir.parent == Path("reports/mine/eval")
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
def test_the_masks_example_runs(study_folder):
    from bgbias.assets.store import u2net_model_path

    try:
        u2net_model_path("u2netp")
    except AssetError as err:
        pytest.skip(f"the u2netp model is not installed: {err.problem}")
    (code,) = examples(slow=True)
    done = run_examples(["import bgbias\n", code])
    assert done["run"].failed == 0
    assert [path.name for path in done["made"]["random-bg"]] == ["repeat-0.json", "repeat-1.json"]
    assert [path.name for path in done["made"]["only-fg"]] == ["repeat-0.json"]
    assert (study_folder / "corrupted-images" / "gallery.png").is_file()
    assert (study_folder / "corrupted-images" / "variants.png").is_file()
