"""``bgbias.leakage``: one's own images (a torch Dataset with masks) and an in-memory encoder, measured as the
library measures them, nothing written unless ``out=``."""

from __future__ import annotations

import pytest

import bgbias
from bgbias.errors import OptionError
from bgbias.leakage_meter.meter import measure_leakage
from tests.leakage_meter.scenes import SIDE, TinyEncoder, scene_samples, scenes, tiny_encoder


def test_ones_own_images_and_module_read_as_the_library_reads_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    own_input = bgbias.ModelInput(input_size=SIDE, resize=SIDE)
    result = bgbias.leakage(scene_samples("class", "random"), split="all", model=TinyEncoder(),
                            model_input=own_input, device="cpu", amp="off", memory_format="contiguous",
                            workers=0)
    table = scenes("class", "random", root=tmp_path)
    expected = measure_leakage(table, tiny_encoder(tmp_path / "encoder"), split="all", workers=0)
    assert result.leakage == pytest.approx(expected.leakage) and result.leakage > 0.95
    assert list(tmp_path.iterdir()) == []  # nothing written: no report, no model home


def test_a_wrong_fill_or_split_is_refused_before_any_work():
    with pytest.raises(OptionError, match="fill='blur' is invalid: it must be one of black, tiled, inpaint"):
        bgbias.leakage("bench", fill="blur")
    with pytest.raises(OptionError, match="split='val' is invalid: it must be one of train, test, all"):
        bgbias.leakage("bench", split="val")
