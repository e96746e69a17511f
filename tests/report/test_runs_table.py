"""The Table-1 layout of several runs: rows, columns, empty cells, foreground scores, files, duplicates."""

from __future__ import annotations

import csv
import json

import pytest

from bgbias.errors import OptionError
from bgbias.installation import installation
from bgbias.methods.attribution import DEFAULT_ATTRIBUTION
from bgbias.report.markdown import table as markdown_table
from bgbias.report.runs_table import table_one, write_runs_report
from tests.report.synthetic import changed, complete, explain_summary, make_report

RUNS = [  # 2 methods × {base, + BGAugment} × 2 datasets, less arcface + BGAugment on cars
    ("cub", "contrastive", False), ("cub", "contrastive", True), ("cub", "arcface", False),
    ("cub", "arcface", True), ("cars", "contrastive", False), ("cars", "contrastive", True),
    ("cars", "arcface", False),
]
FOREGROUND = {
    ("contrastive", False, "cub", DEFAULT_ATTRIBUTION): explain_summary("cub", 0.25, 0.08),
    ("arcface", True, "cars", DEFAULT_ATTRIBUTION): explain_summary("cars", 0.561, None),
}


def _reports():
    return [complete(make_report(method, bgaugment, dataset, seed=seed))
            for seed, (dataset, method, bgaugment) in enumerate(RUNS)]


def _map_cells(report):
    mean, std = report.corrupted.mean.map_at_r, report.corrupted.std.map_at_r
    return [f"{100 * report.clean.map_at_r:.2f}", f"{100 * mean:.2f} ± {100 * std:.2f}"]


def test_layout_rows_per_method_then_bgaugment_and_empty_missing_cells():
    reports = _reports()
    headers, rows = table_one(reports)
    assert headers == ["method", "cub clean", "cub corrupted", "cars clean", "cars corrupted"]
    assert [row[0] for row in rows] == ["contrastive", "contrastive + BGAugment", "arcface",
                                        "arcface + BGAugment"]
    by_run = dict(zip(RUNS, reports, strict=True))
    for row, (method, bgaugment) in zip(rows, [("contrastive", False), ("contrastive", True),
                                               ("arcface", False), ("arcface", True)], strict=True):
        assert row[1:3] == _map_cells(by_run["cub", method, bgaugment])
        if (method, bgaugment) == ("arcface", True):
            assert row[3:5] == ["", ""]
        else:
            assert row[3:5] == _map_cells(by_run["cars", method, bgaugment])


def test_foreground_scores_add_one_column_per_dataset():
    headers, rows = table_one(_reports(), FOREGROUND)
    assert headers[-2:] == ["cub fg score", "cars fg score"]
    assert [row[-2:] for row in rows] == [["0.25 ± 0.08", ""], ["", ""], ["", ""], ["", "0.56"]]


def test_clean_only_runs_and_other_splits():
    reports = [complete(make_report("triplet", False, "cub", repeats=0)),
               complete(make_report("triplet", True, "cub", split="val"))]
    headers, rows = table_one(reports)
    assert headers == ["method", "cub clean", "cub corrupted", "cub (val) clean", "cub (val) corrupted"]
    assert rows[0][1] != "" and rows[0][2:] == ["", "", ""]
    assert rows[1][1:3] == ["", ""] and rows[1][3] != ""


def test_duplicate_runs_name_both():
    reports = _reports()
    twin = changed(reports[2], run="runs/cub-arcface-again")
    with pytest.raises(OptionError, match="arcface on cub") as error:
        table_one([*reports, twin])
    assert reports[2].run in str(error.value) and "runs/cub-arcface-again" in str(error.value)


def test_markdown_table():
    text = markdown_table(["method", "a|b"], [["x", "1.00"], ["y", None]])
    assert text.splitlines() == ["| method | a\\|b |", "|---|---:|", "| x | 1.00 |", "| y |  |"]


@pytest.mark.slow
def test_written_runs_report_parses_and_is_stable(tmp_path):
    reports = _reports()
    paths = write_runs_report(reports, FOREGROUND, tmp_path / "a")
    again = write_runs_report(_reports(), FOREGROUND, tmp_path / "b")
    assert set(paths) == {"table_md", "table_csv", "table_json", "runs_png"}
    for key, path in paths.items():
        assert path.read_bytes() == again[key].read_bytes(), key
    headers, rows = table_one(reports, FOREGROUND)
    with paths["table_csv"].open(newline="") as handle:
        assert list(csv.reader(handle)) == [headers, *rows]
    table = json.loads(paths["table_json"].read_text())
    assert (table["headers"], table["rows"]) == (headers, rows)
    assert [run["run"] for run in table["runs"]] == [r.run for r in reports]
    assert table["runs"][0]["corrupted_map_at_r_mean"] == reports[0].corrupted.mean.map_at_r
    assert table["foreground"][1] == {"method": "arcface", "bgaugment": True, "dataset": "cars",
                                      "attribution": "smoothgrad", "geometry": {"crop": 32}, "scored": 41,
                                      "mean": 0.561, "std": None, "images": 41,
                                      "installation": installation()}
    markdown = paths["table_md"].read_text()
    assert markdown_table(headers, rows) in markdown
    assert f"arcface + BGAugment on cub (test split): {reports[3].run}" in markdown
    assert paths["runs_png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_the_table_holds_no_folder_of_the_machine_that_explained(tmp_path):
    """An explanation's summary names where its dataset lay (for the gallery); two clones in different
    folders must still write the same report bytes."""
    tables = []
    for clone in ("a", "b"):
        foreground = {key: summary.model_copy(update={"dataset_root": f"/home/{clone}/data/bench"})
                      for key, summary in FOREGROUND.items()}
        tables.append(write_runs_report(_reports(), foreground, tmp_path / clone)["table_json"].read_bytes())
    assert tables[0] == tables[1]
    assert b"/home/" not in tables[0]
