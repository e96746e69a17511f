"""The bias dial's report: points of (ρ, masks, BGAugment) over training seeds, in a table and a plot."""

from __future__ import annotations

import json

import pytest

from bgbias.errors import OptionError
from bgbias.report.dial import DialPoint, dial_table, plot_dial, write_dial_report
from tests.report.synthetic import complete


def _report(clean, corrupted, seed=0):
    return complete({"run": f"runs/x-{seed}", "seed": seed, "clean": {"map_at_r": clean},
                     "corrupted": {"mean": {"map_at_r": corrupted}},
                     "drop": {"map_at_r": {"relative": (clean - corrupted) / clean}}})


POINTS = [
    DialPoint(0.9, "u2netp", False, (_report(0.60, 0.20),)),
    DialPoint(0.0, "ground-truth", True, (_report(0.40, 0.40), _report(0.42, 0.40, seed=1))),
    DialPoint(0.0, "ground-truth", False, (_report(0.40, 0.38),)),
    DialPoint(0.9, "ground-truth", False, (_report(0.60, 0.24),)),
]


def test_rows_go_by_masks_then_rho_then_vanilla_first_with_seed_spreads():
    headers, rows = dial_table(POINTS, "ms")
    assert [(row[0], row[1], row[2]) for row in rows] == [
        ("0", "exact masks", "ms"), ("0", "exact masks", "ms + BGAugment"), ("0.9", "exact masks", "ms"),
        ("0.9", "U²-Net masks", "ms")]
    two_seeds = dict(zip(headers, rows[1], strict=True))
    assert two_seeds["seeds"] == "2" and two_seeds["clean MAP@R"] == "41.00 ± 1.41"
    assert two_seeds["relative drop (%)"] == "2.4 ± 3.4"  # drops 0 and 4.76 %
    assert dict(zip(headers, rows[2], strict=True))["relative drop (%)"] == "60.0"


@pytest.mark.slow
def test_the_report_files_are_written_and_the_plot_is_deterministic(tmp_path):
    paths = write_dial_report(POINTS, tmp_path / "dial", "ms")
    assert set(paths) == {"dial_md", "dial_json", "dial_png"}
    assert "| 0.9 | U²-Net masks | ms | 1 | 60.00 | 20.00 | 66.7 |" in paths["dial_md"].read_text()
    assert json.loads(paths["dial_json"].read_text())["runs"][0] == {
        "rho": 0.9, "masks": "u2netp", "bgaugment": False, "runs": ["runs/x-0"]}
    again = plot_dial(POINTS, tmp_path / "again.png", "ms")
    assert again.read_bytes() == paths["dial_png"].read_bytes()


def test_a_dial_without_points_is_refused(tmp_path):
    with pytest.raises(OptionError, match="no evaluated runs"):
        plot_dial([], tmp_path / "x.png", "ms")
