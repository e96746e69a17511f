"""benchmarks/leakage_dial.py's parts that need no bench: the dial's trained drops read from its record (the
vanilla exact-mask rows only) or, without one, the values docs/results.md reports; the correlations; the
plot."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bgbias.report.dial import DIAL_COLUMNS
from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


def _script():
    return load_script("benchmarks/leakage_dial.py")


def test_the_drops_come_from_the_dials_vanilla_exact_mask_rows(tmp_path):
    record = tmp_path / "dial.json"
    rows = [["0", "exact masks", "multi_similarity", "1", "41.05", "39.43 ± 0.54", "3.9"],
            ["0", "exact masks", "multi_similarity + BGAugment", "1", "35.82", "46.98 ± 0.54", "-31.1"],
            ["0.5", "exact masks", "multi_similarity", "2", "48.35 ± 1.0", "39.21 ± 0.45", "18.9 ± 2.0"],
            ["0.9", "exact masks", "multi_similarity", "0", "", "", ""],
            ["0", "U²-Net masks", "multi_similarity", "1", "41.05", "30.99 ± 0.74", "24.5"]]
    record.write_text(json.dumps({"method": "multi_similarity", "columns": DIAL_COLUMNS, "rows": rows}))
    script = _script()
    assert script.dial_drops("ground-truth", record) == ({0.0: 3.9, 0.5: 18.9}, str(record))
    assert script.dial_drops("u2netp", record) == ({0.0: 24.5}, str(record))


def test_without_a_record_the_drops_are_the_ones_the_docs_report(tmp_path):
    script = _script()
    results = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    for masks, label in (("ground-truth", "exact"), ("u2netp", "u2netp")):
        drops, source = script.dial_drops(masks, tmp_path / "missing.json")
        assert sorted(drops) == [0.0, 0.5, 0.9, 1.0] and source.startswith("docs/data/dial/dial.json")
        for rho, drop in drops.items():
            assert re.search(rf"\| {rho:g} \| {label} \| multi-similarity \| .* \| {drop:.1f} % \|", results)


@pytest.mark.slow
def test_correlations_and_the_plot(tmp_path):
    script = _script()
    assert script.correlations([0.0, 0.1, 0.5, 0.9], [1.0, 2.0, 3.0, 10.0])["spearman"] == 1.0
    rows = [{"rho": rho, "fill": fill, "leakage": value, "interval": [value - 0.1, value + 0.1]}
            for fill in ("black", "inpainted") for rho, value in zip((0.0, 1.0), (0.1, 0.8), strict=True)]
    path = tmp_path / "leakage-dial.png"
    script.plot(rows, {0.0: 3.9, 1.0: 84.5}, path, "exact masks")
    assert path.read_bytes().startswith(b"\x89PNG")
