"""Every Markdown writer shows the names it is given (class folders, image names, run folders, titles, model
descriptions) as text: no HTML, no link or image target with a scheme, no extra table column, no new block."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from PIL import Image

from bgbias.measurement.record import evaluation_record
from bgbias.measurement.summary import summarize_evaluation
from bgbias.report.dial import DialPoint, write_dial_report
from bgbias.report.document import Figure
from bgbias.report.evaluation import format_evaluation_markdown
from bgbias.report.runs_table import write_runs_report
from bgbias.report.seeds import write_seeds_report
from bgbias.report.study_report import StudyRunResult, write_study_report
from tests.report.hostile import HOSTILE_CLASSES, HOSTILE_IMAGES, HOSTILE_RUNS, HOSTILE_TITLE, assert_inert
from tests.report.synthetic import complete, make_report, make_run

HOSTILE_METHOD = "<b>ms</b>|x\n# y"


def _hostile_report(method: str = "triplet", bgaugment: bool = False, seed: int = 0) -> dict:
    """A report whose image ids are hostile class folders and file names, with a hostile run folder and setup
    values."""
    clean, corrupted, labels, _ids = make_run(3, seed)
    names = [f"{HOSTILE_CLASSES[i % 4]}/{HOSTILE_IMAGES[i % 3]}" for i in range(len(labels))]
    meta = {"run": f"runs/{HOSTILE_RUNS[0]}", "method": method, "bgaugment": bgaugment, "dataset": "folder",
            "split": "test", "seed": seed,
            "checkpoint": {"path": f"runs/{HOSTILE_RUNS[1]}/best.pt", "epoch": 2},
            "model": {"spec": "[x](javascript:alert(7))", "input": {"note": "<script>a\nb</script>"}}}
    return summarize_evaluation(clean, corrupted, labels, names, meta)


def _unescaped(cell: str) -> str:
    """What a Markdown renderer shows of an escaped cell."""
    text = re.sub(r"\\(.)", r"\1", cell.strip())
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def test_report_md_shows_image_names_run_folders_and_setup_as_text():
    report = _hostile_report()
    markdown = format_evaluation_markdown(evaluation_record(report))
    assert_inert(markdown, "report.md")
    assert markdown.splitlines()[0].endswith("checkpoint best.pt (epoch 2)")
    assert "- run: runs/&lt;img src=x onerror=alert(3)&gt; run\\|a" in markdown
    assert "  - spec: \\[x\\](javascript:alert(7))" in markdown
    assert "&lt;script&gt;a b&lt;/script&gt;" in markdown
    rows = [line for line in markdown.split("images hurt most")[1].splitlines() if line.startswith("| ")][1:]
    shown = [_unescaped(re.split(r"(?<!\\)\|", row)[1]) for row in rows]
    assert shown == [row["id"].replace("\n", " ") for row in report["images_hurt_most"]]


@pytest.mark.slow
def test_tables_seeds_dial_and_study_page_show_names_as_text(tmp_path):
    reports = [complete({**make_report(HOSTILE_METHOD, bgaugment, "folder", seed=seed,
                                       run=f"runs/{HOSTILE_RUNS[seed]}"), "seed": seed})
               for seed in (0, 1) for bgaugment in (False, True)]
    written = {
        "table.md": write_runs_report(reports[:2], None, tmp_path / "table")["table_md"],
        "seeds.md": write_seeds_report(reports, tmp_path / "seeds")["seeds_md"],
        "dial.md": write_dial_report([DialPoint(0.5, "u2netp", False, tuple(reports[::2]))],
                                     tmp_path / "dial", HOSTILE_METHOD)["dial_md"],
    }
    figure = tmp_path / "figures" / "javascript:alert(8).png"
    figure.parent.mkdir()
    Image.new("RGB", (4, 3)).save(figure)
    results = [StudyRunResult(tmp_path / HOSTILE_RUNS[i % 2] / str(i), report, {})
               for i, report in enumerate(reports)]
    written["study.md"] = write_study_report(
        results, tmp_path / "study", title=HOSTILE_TITLE, reference=[HOSTILE_METHOD],
        figures=[Figure(figure, f"training curves of {HOSTILE_RUNS[0]}")],
        failures={HOSTILE_RUNS[1]: "<img src=x onerror=alert(9)> failed\n  fix: [x](javascript:alert(1))"},
    )["study_md"]
    for name, path in written.items():
        assert_inert(path.read_text(encoding="utf-8"), name)
    study = written["study.md"].read_text(encoding="utf-8")
    assert "](../figures/javascript%3Aalert%288%29.png)" in study  # a relative path, whatever its name
    assert "training curves of &lt;img src=x onerror=alert(3)&gt; run\\|a*" in study
    assert "&lt;b&gt;ms&lt;/b&gt;\\|x # y" in written["table.md"].read_text(encoding="utf-8")


def test_a_markdown_file_has_no_line_a_name_could_start(tmp_path):
    reports = [complete(make_report("- item", False, "folder", run="# heading\n1. list"))]
    markdown = write_runs_report(reports, None, Path(tmp_path))["table_md"].read_text(encoding="utf-8")
    runs = markdown.split("## Runs")[1]
    assert "\n# heading" not in runs and "\n1. list" not in runs
    assert "- \\- item on folder (test split): # heading 1. list" in runs
