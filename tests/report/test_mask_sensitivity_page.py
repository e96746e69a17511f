"""How much the masks decide, as the pages show it: the evaluation page's block and the study page's table,
from reports that have the reading (and nothing from those that do not)."""

from __future__ import annotations

from pathlib import Path

from bgbias.report.document import Table, to_markdown
from bgbias.report.evaluation import format_evaluation_markdown
from bgbias.report.mask_sensitivity import mask_sensitivity_section
from tests.report.synthetic import changed, complete

SCORES = {"map_at_r": 0.5, "r_precision": 0.5, "precision_at_1": 0.5}


def _paired(estimate, low, high, p_value):
    return {"difference": {"estimate": estimate, "low": low, "high": high, "level": 0.95}, "p_value": p_value,
            "queries": 12}


def _sensitivity(second_map, estimate, low, high, p_value, iou):
    return {
        "first": {"masks": "masks/bench-ground-truth", "mask_maker": None},
        "second": {"masks": "masks/bench-u2netp",
                   "mask_maker": {"model": "u2netp", "backend": "torch", "precision": "fp32"}},
        "corrupted": {"repeats": [], "mean": {**SCORES, "map_at_r": second_map},
                      "std": {**SCORES, "map_at_r": 0.01}},
        "difference": {"map_at_r": _paired(estimate, low, high, p_value), "r_precision": None,
                       "precision_at_1": None},
        "agreement": {"images": 12, "mean": iou, "median": iou, "worst": 0.25,
                      "worst_images": [{"id": "a.jpg", "iou": 0.25}]},
    }


REPORT = complete({"method": "ms", "seed": 0, "images": 12, "classes": 3, "scored": 12,
                   "corrupted": {"mean": {"map_at_r": 0.4}, "std": {"map_at_r": 0.02}},
                   "drop": {name: {"absolute": 0.1} for name in SCORES}})


def test_the_evaluation_page_shows_both_sources_the_difference_and_the_agreement():
    report = changed(REPORT, mask_sensitivity=_sensitivity(0.3, -0.1, -0.15, -0.05, 0.002, 0.8125))
    page = format_evaluation_markdown(report)
    block = page.split("## How much do the masks decide", 1)[1].split("\n## ")[0]
    assert "| first: masks/bench-ground-truth; no bgbias masks manifest" in block
    assert "| 40.00 ± 2.00 |" in block
    assert "| second: masks/bench-u2netp; u2netp, torch fp32 | 30.00 ± 1.00 |" in block
    assert "-10.00 \\[-15.00, -5.00\\] points (95 % interval), p 0.002, 12 queries" in block
    assert "IoU 0.812 on average (median 0.812, worst 0.250) over 12 images" in block
    assert "least: a.jpg 0.25" in block and "How to read it" in block
    assert "How much do the masks decide" not in format_evaluation_markdown(REPORT)


def test_the_study_page_gives_a_row_to_each_run_with_the_reading():
    read = changed(REPORT, mask_sensitivity=_sensitivity(0.42, 0.02, -0.01, 0.05, 0.31, 0.9))
    blocks = mask_sensitivity_section([read, changed(REPORT, seed=1)])
    table = next(block for block in blocks if isinstance(block, Table))
    assert table.rows == (("ms, seed 0", "40.00 ± 2.00", "42.00 ± 1.00", "+2.00 [-1.00, +5.00]", "0.310",
                           "0.900"),)
    text = to_markdown(blocks, Path())
    assert "`masks/bench-ground-truth` then `masks/bench-u2netp`: 1 runs" in text
    assert mask_sensitivity_section([REPORT]) == []
