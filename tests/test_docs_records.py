"""Every table and number of results in README.md and docs/ comes from a record under docs/data/
(scripts/docs_records.py): the pages hold what the records say, no record's number is typed by hand anywhere
else, and every figure of results was drawn from its records as they are now."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[1]


docs_records = load_script("scripts/docs_records.py")


@pytest.mark.slow
def test_the_pages_hold_what_their_records_say():
    problems = [str(problem) for problem in docs_records.problems()]
    assert not problems, "\n".join(problems)


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A tiny repository: one record, one page showing a table, a cell and a value of it."""
    (tmp_path / "docs" / "data" / "study").mkdir(parents=True)
    record = {"source": {"command": "bgbias study", "date": "2026-11-26", "machine": "2 cores"},
              "tables": {"table1": {"columns": ["method", "clean", "corrupted"],
                                    "rows": [["ms", "65.27 ± 1.23", "23.77"], ["dcml", "72.85", "28.18"]]}},
              "values": {"hours": "7.7"}}
    (tmp_path / "docs" / "data" / "study" / "table1.json").write_text(json.dumps(record), encoding="utf-8")
    page = tmp_path / "README.md"
    page.write_text("# Results\n\n"
                    "<!-- table study/table1.json columns=method; corrupted>corrupted MAP@R -->\n"
                    "<!-- /table -->\n\n"
                    "ms keeps <!-- value study/table1.json#table1 | ms | corrupted --><!-- /value --> "
                    "points in <!-- value study/table1.json#hours --><!-- /value --> h "
                    "(<!-- source study/table1.json --><!-- /source -->).\n", encoding="utf-8")
    monkeypatch.setattr(docs_records, "ROOT", tmp_path)
    monkeypatch.setattr(docs_records, "DATA", tmp_path / "docs" / "data")
    monkeypatch.setattr(docs_records, "FIGURES", {})
    monkeypatch.setattr(docs_records, "VIEWS", {})
    return tmp_path


def test_write_fills_every_region_and_then_the_check_passes(site):
    assert [str(problem) for problem in docs_records.problems()] == [
        "README.md:4: differs from its records: run python scripts/docs_records.py --write"]
    docs_records.write()
    text = (site / "README.md").read_text(encoding="utf-8")
    table = "| method | corrupted MAP@R |\n|---|---:|\n| ms | 23.77 |\n| dcml | 28.18 |\n<!-- /table -->"
    assert table in text
    assert "ms keeps <!-- value study/table1.json#table1 | ms | corrupted -->23.77<!-- /value -->" in text
    assert "-->7.7<!-- /value --> h" in text
    assert "<!-- source study/table1.json -->`bgbias study`, 2026-11-26, 2 cores<!-- /source -->" in text
    assert list(docs_records.problems()) == []


def test_a_number_changed_in_its_record_changes_every_place_that_shows_it(site):
    docs_records.write()
    path = site / "docs" / "data" / "study" / "table1.json"
    path.write_text(path.read_text(encoding="utf-8").replace("23.77", "24.01"), encoding="utf-8")
    assert [problem.line for problem in docs_records.problems()] == [6]
    docs_records.write()
    text = (site / "README.md").read_text(encoding="utf-8")
    assert text.count("24.01") == 2 and "23.77" not in text


def test_a_number_of_a_record_typed_by_hand_is_found(site):
    docs_records.write()
    page = site / "README.md"
    page.write_text(page.read_text(encoding="utf-8") + "\nThe vanilla run keeps 23.77 points; 72.85 clean.\n",
                    encoding="utf-8")
    (site / "docs" / "other.md").write_text("DCML: 72.85. A ratio of 1.23 is no measurement of it.\n",
                                            encoding="utf-8")
    fix = "show it with a <!-- value ... --> marker, or leave it out"
    assert [str(problem) for problem in docs_records.problems()] == [
        f"README.md:12: 23.77 is a number of docs/data/study/table1.json: {fix}",
        f"README.md:12: 72.85 is a number of docs/data/study/table1.json: {fix}",
        f"docs/other.md:1: 72.85 is a number of docs/data/study/table1.json: {fix}"]


@pytest.mark.parametrize(("marker", "message"), [
    ("<!-- table study/none.json -->\n<!-- /table -->", "study/none.json: no such record under docs/data/"),
    ("<!-- table study/table1.json#table2 -->\n<!-- /table -->", "has no table 'table2' (it has: table1)"),
    ("<!-- table study/table1.json columns=method; fg -->\n<!-- /table -->", "no column 'fg'"),
    ("<!-- value study/table1.json#table1 | arcface | clean --><!-- /value -->",
     "0 rows start with 'arcface'"),
    ("<!-- value study/table1.json#minutes --><!-- /value -->", "has no value 'minutes' (it has: hours)"),
    ("<!-- table ../../../etc/passwd.json -->\n<!-- /table -->", "a record is a .json file under docs/data/"),
])
def test_a_marker_naming_what_is_not_there_is_an_error_naming_it(site, marker, message):
    (site / "README.md").write_text(marker + "\n", encoding="utf-8")
    (problem,) = docs_records.problems()
    assert problem.page.name == "README.md" and message in problem.message


def test_a_figure_not_drawn_from_its_current_records_is_stale(site):
    drawn = []

    def draw(records, path, metadata):
        from PIL import Image, PngImagePlugin

        info = PngImagePlugin.PngInfo()
        for key, value in metadata.items():
            info.add_text(key, value)
        Image.new("RGB", (4, 4)).save(path, pnginfo=info)
        drawn.append(records[0]["values"]["hours"])

    (site / "docs" / "images").mkdir()
    docs_records.figure("hours.png", "study/table1.json")(draw)
    docs_records.write()
    assert drawn == ["7.7"] and list(docs_records.problems()) == []
    path = site / "docs" / "data" / "study" / "table1.json"
    path.write_text(path.read_text(encoding="utf-8").replace("7.7", "7.9"), encoding="utf-8")
    stale = [problem for problem in docs_records.problems() if problem.page.name == "hours.png"]
    assert len(stale) == 1 and "was not drawn from the current study/table1.json" in stale[0].message
    docs_records.write()
    assert drawn == ["7.7", "7.9"]


def test_leading_zeros_are_no_precision(site):
    """A small std such as 0.016 is no measurement a reader would recognise on another page; 0.180 is one on
    the page that shows its record."""
    path = site / "docs" / "data" / "study" / "table1.json"
    record = json.loads(path.read_text(encoding="utf-8"))
    record["values"]["fg"] = "0.180 ± 0.016"
    path.write_text(json.dumps(record), encoding="utf-8")
    docs_records.write()
    page = site / "README.md"
    page.write_text(page.read_text(encoding="utf-8") + "\nSAM's map: 0.180 ± 0.016.\n", encoding="utf-8")
    (site / "docs" / "other.md").write_text("A std of 0.016 and a share of 0.180.\n", encoding="utf-8")
    assert [str(problem).split(" is ")[0] for problem in docs_records.problems()] == ["README.md:12: 0.180"]


def test_the_bias_dial_is_drawn_from_its_record(monkeypatch, tmp_path):
    """docs/images/dial.png is the plot `bgbias study --dial` draws, its curves read from the dial's table:
    every row of the table is one point of its curve (compared with the record itself, so that no number of
    it is held here)."""
    import bgbias.figures
    import bgbias.report.dial

    drawn = {}
    real_dial_figure = bgbias.report.dial.dial_figure

    def dial_figure(curves, method):
        drawn["curves"], drawn["method"] = curves, method
        return real_dial_figure(curves, method)

    monkeypatch.setattr(bgbias.report.dial, "dial_figure", dial_figure)
    monkeypatch.setattr(bgbias.figures, "save_png", lambda figure, path, text: drawn.update(text=text))
    files, draw = docs_records.FIGURES["dial.png"]
    record = docs_records.load(files[0])
    draw([record], tmp_path / "dial.png", {"bgbias-records": "digest"})
    assert drawn["method"] == record["method"] and drawn["text"] == {"bgbias-records": "digest"}
    table = docs_records.tables_of(record)["dial"]
    rows = [dict(zip(table["columns"], row, strict=True)) for row in table["rows"]]
    masks = {"exact": "ground-truth", "u2netp": "u2netp"}
    points = {(source, bgaugment, mark.rho): mark
              for (source, bgaugment), marks in drawn["curves"].items() for mark in marks}
    assert len(points) == len(rows)
    for row in rows:
        mark = points[masks[row["masks"]], row["run"].endswith("+ BGAugment"), float(row["ρ"])]
        assert mark.drop == (docs_records.signed(row["relative drop"].rstrip(" %")), 0.0)
        assert mark.corrupted == (docs_records.signed(row["corrupted MAP@R"].split("±")[0]), 0.0)


def test_a_marker_opening_a_line_is_found(site):
    """Markdown would end the paragraph before it and print the line as raw HTML."""
    page = site / "README.md"
    page.write_text(page.read_text(encoding="utf-8").replace("points in <!-- value", "points in\n<!-- value"),
                    encoding="utf-8")
    (problem,) = [problem for problem in docs_records.problems() if "opens the line" in problem.message]
    assert str(problem).startswith("README.md:7: a marker opens the line")


def test_a_heading_with_a_bar_stays_one_column(site):
    path = site / "docs" / "data" / "study" / "bits.json"
    table = {"columns": ["lever", "largest |Δ|"], "rows": [["CL", "4e-07"]]}
    path.write_text(json.dumps({"tables": {"bits": table}}), encoding="utf-8")
    (site / "README.md").write_text("<!-- table study/bits.json -->\n<!-- /table -->\n", encoding="utf-8")
    docs_records.write()
    assert "| lever | largest \\|Δ\\| |\n|---|---:|\n" in (site / "README.md").read_text(encoding="utf-8")


def test_columns_that_share_a_heading_each_show_their_own_cells(site):
    path = site / "docs" / "data" / "study" / "ratios.json"
    path.write_text(json.dumps({"tables": {"runs": {"columns": ["run", "ratio", "ratio"],
                                                    "rows": [["1", "0.71×", "0.51×"]]}}}), encoding="utf-8")
    (site / "README.md").write_text("<!-- table study/ratios.json -->\n<!-- /table -->\n", encoding="utf-8")
    docs_records.write()
    assert "| 1 | 0.71× | 0.51× |" in (site / "README.md").read_text(encoding="utf-8")


@pytest.fixture
def calibration_view(site):
    """A view computed from a committed file outside docs/data, as the leakage dial's from its calibration."""
    calibration = site / "bgbias" / "configs" / "dial.json"
    calibration.parent.mkdir(parents=True)
    calibration.write_text(json.dumps({"leakage": [0.004, 0.54]}), encoding="utf-8")

    @docs_records.view("dial", "bgbias/configs/dial.json")
    def dial():
        leakage = json.loads((docs_records.ROOT / "bgbias/configs/dial.json").read_text(encoding="utf-8"))
        leakage = leakage["leakage"]
        rows = [[rho, f"{100 * value:.1f}"] for rho, value in zip("01", leakage, strict=True)]
        return {"tables": {"curve": {"columns": ["ρ", "leakage"], "rows": rows}},
                "values": {"spread": f"{100 * (leakage[1] - leakage[0]):.1f}"}}

    (site / "docs" / "leakage.md").write_text(
        "<!-- table view:dial#curve -->\n<!-- /table -->\n\n"
        "It separates ρ by <!-- value view:dial#spread --><!-- /value --> points.\n", encoding="utf-8")
    return calibration


def test_a_view_fills_its_regions_from_the_committed_file_it_is_computed_from(site, calibration_view):
    docs_records.write()
    page = site / "docs" / "leakage.md"
    assert "| 1 | 54.0 |" in page.read_text(encoding="utf-8") and "-->53.6<!-- /value -->" in page.read_text(
        encoding="utf-8")
    assert list(docs_records.problems()) == []
    calibration_view.write_text(json.dumps({"leakage": [0.004, 0.55]}), encoding="utf-8")
    assert [str(problem) for problem in docs_records.problems()] == [
        "docs/leakage.md:5: differs from its records: run python scripts/docs_records.py --write"]
    docs_records.write()
    assert "| 1 | 55.0 |" in page.read_text(encoding="utf-8") and "-->54.6<!-- /value -->" in page.read_text(
        encoding="utf-8")


def test_a_number_of_a_view_typed_by_hand_is_found(site, calibration_view):
    docs_records.write()
    page = site / "docs" / "leakage.md"
    page.write_text(page.read_text(encoding="utf-8") + "At ρ 1 it reads 54.0 %.\n", encoding="utf-8")
    assert [str(problem) for problem in docs_records.problems()] == [
        "docs/leakage.md:9: 54.0 is a number of view:dial: "
        "show it with a <!-- value ... --> marker, or leave it out"]


def test_a_view_that_is_not_registered_is_an_error_naming_the_known_ones(site, calibration_view):
    (site / "README.md").write_text("<!-- table view:dail#curve -->\n<!-- /table -->\n", encoding="utf-8")
    (problem,) = [problem for problem in docs_records.problems() if problem.page.name == "README.md"]
    assert "view:dail: no such view (known: dial)" in problem.message


def test_a_figure_drawn_from_a_view_is_stale_when_the_view_s_file_changes(site, calibration_view):
    from PIL import Image, PngImagePlugin

    def draw(records, path, metadata):
        info = PngImagePlugin.PngInfo()
        for key, value in metadata.items():
            info.add_text(key, value)
        Image.new("RGB", (4, 4)).save(path, pnginfo=info)

    (site / "docs" / "images").mkdir()
    docs_records.figure("dial.png", "view:dial")(draw)
    docs_records.write()
    assert list(docs_records.problems()) == []
    calibration_view.write_text(json.dumps({"leakage": [0.004, 0.54], "note": "redone"}), encoding="utf-8")
    stale = [str(problem) for problem in docs_records.problems()]
    assert stale == ["docs/images/dial.png:1: was not drawn from the current view:dial: "
                     "run python scripts/docs_records.py --write"]


def test_the_leakage_dial_view_reads_the_meter_s_calibration(monkeypatch, tmp_path):
    """docs/leakage.md's calibration table is computed from bgbias/configs/leakage_dial.json, not copied."""
    calibration = json.loads((ROOT / "bgbias/configs/leakage_dial.json").read_text(encoding="utf-8"))
    exact = next(curve for curve in calibration["curves"]
                 if curve["masks"] == "ground-truth" and curve["fill"] == "inpainted")
    exact["leakage"][0] = 0.031
    (tmp_path / "bgbias" / "configs").mkdir(parents=True)
    (tmp_path / "bgbias/configs/leakage_dial.json").write_text(json.dumps(calibration), encoding="utf-8")
    monkeypatch.setattr(docs_records, "ROOT", tmp_path)
    record = docs_records.load("view:leakage-dial")
    row = next(row for row in record["tables"]["exact"]["rows"] if row[:2] == ["0", "inpainted"])
    assert row[2].startswith("3.1 [") and record["values"]["inpainted at ρ 0"] == "3.1"


def test_a_marker_inside_code_is_an_example_left_as_written(site):
    example = ("Write `<!-- value study/table1.json#hours --><!-- /value -->` for one value, or a table:\n\n"
               "```text\n<!-- table study/none.json -->\n<!-- /table -->\n```\n")
    page = site / "README.md"
    page.write_text(example, encoding="utf-8")
    docs_records.write()
    assert page.read_text(encoding="utf-8") == example and list(docs_records.problems()) == []
