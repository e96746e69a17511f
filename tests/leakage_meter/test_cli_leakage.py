"""``bgbias leakage``: a CSV table of generated scenes with their masks, measured by an encoder given as a
factory spec; the summary printed, the files written only with ``--out``."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from PIL import Image

from bgbias.cli import main
from tests.leakage_meter.scenes import scene_samples


@pytest.mark.slow
def test_the_command_prints_the_summary_and_writes_only_with_out(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rows = ["path,label,mask"]
    for index, (image, label, mask) in enumerate(scene_samples("class", "random", per_class=6)):
        Image.fromarray(image).save(tmp_path / f"{index}.png")
        Image.fromarray(mask).save(tmp_path / f"{index}-mask.png")
        rows.append(f"{index}.png,{label},{index}-mask.png")
    (tmp_path / "scenes.csv").write_text("\n".join(rows) + "\n")
    command = ["leakage", "--dataset", "table", "--root", "scenes.csv", "--split", "all", "--model",
               "tests.leakage_meter.scenes:TinyEncoder", "--device", "cpu", "--amp", "off", "--workers", "0",
               "--no-progress", "--fill", "tiled"]
    before = sorted(path.name for path in tmp_path.iterdir())
    printed = CliRunner().invoke(main, command)
    assert printed.exit_code == 0, printed.output
    assert "comes from the background" in printed.output and "hole filled: tiled" in printed.output
    assert sorted(path.name for path in tmp_path.iterdir()) == before
    written = CliRunner().invoke(main, [*command, "--out", "leakage"])
    assert written.exit_code == 0, written.output
    record = json.loads((tmp_path / "leakage" / "leakage.json").read_text())
    assert record["split"] == "all" and record["fill"] == "tiled" and record["leakage"] > 0.9
    assert (tmp_path / "leakage" / "leakage-classes.png").is_file()
    assert "leakage-classes.png" in written.output


def test_a_fill_that_does_not_exist_is_refused_by_the_option():
    result = CliRunner().invoke(main, ["leakage", "--dataset", "bench", "--fill", "blur"])
    assert result.exit_code == 2 and "'blur' is not one of 'black', 'tiled', 'inpainted'" in result.output
