"""`bgbias report --study` end to end on runs whose class folders, image names, run folders and title are
markup: every Markdown file shows them as text; the gallery uses the masks and dataset folder the explanation
recorded; a report folder is replaced all at once or not at all."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from bgbias.cli import main
from tests.replicas import write_picture
from tests.report.hostile import HOSTILE_CLASSES, HOSTILE_IMAGES, HOSTILE_RUNS, HOSTILE_TITLE, assert_inert


def _dataset(base: Path) -> tuple[Path, Path]:
    """A folder dataset of 8 classes, the 4 test classes (the last in sorted order) with hostile names and
    images, and its saliency masks (the exact ones) in a folder of their own."""
    root, masks = base / "dataset", base / "masks-elsewhere"
    names = [f"{index} plain" for index in range(4)] + list(HOSTILE_CLASSES)
    for number, name in enumerate(names):
        for k, image in enumerate(HOSTILE_IMAGES):
            mask = masks / name / (Path(image).stem + ".png")
            write_picture(root / name / image, 3 * number + k, mask)
    return root, masks


@pytest.fixture(scope="module")
def hostile(tiny_run, tiny_bench, tmp_path_factory) -> dict[str, Path]:
    """Two runs (vanilla and BGAugment, seed 0) in hostile folders, evaluated with corrupted repeats and
    explained on the hostile dataset with masks outside their default folder."""
    base = tmp_path_factory.mktemp("hostile")
    root, masks = _dataset(base)
    runs = []
    for name, bgaugment in zip(HOSTILE_RUNS, (False, True), strict=True):
        run = base / "runs" / name
        shutil.copytree(tiny_run, run)
        config = json.loads((run / "config.json").read_text())
        config["bgaugment"]["enabled"] = bgaugment
        (run / "config.json").write_text(json.dumps(config))
        data = ["--checkpoint", str(run), "--dataset", "folder", "--root", str(root), "--masks", str(masks),
                "--device", "cpu", "--no-progress"]
        evaluated = CliRunner().invoke(main, ["eval", *data, "--corrupted", "--repeats", "2", "--backgrounds",
                                              str(tiny_bench / "backgrounds"), "--manifests",
                                              str(base / "manifests"), "--workers", "0"])
        assert evaluated.exit_code == 0, evaluated.output
        explained = CliRunner().invoke(main, ["explain", *data, "--limit", "4", "--gallery", "2"])
        assert explained.exit_code == 0, explained.output
        runs.append(run)
    return {"vanilla": runs[0], "bgaugment": runs[1], "masks": masks, "dataset": root}


def _copies(hostile, tmp_path) -> list[Path]:
    copies = []
    for key in ("vanilla", "bgaugment"):
        copy = tmp_path / "runs" / hostile[key].name
        shutil.copytree(hostile[key], copy)
        copies.append(copy)
    return copies


def _report_study(runs, out):
    return CliRunner().invoke(main, ["report", "--study", "--title", HOSTILE_TITLE, "--out", str(out),
                                     *map(str, runs)])


@pytest.mark.slow
def test_every_markdown_file_shows_hostile_names_as_text(hostile, tmp_path):
    out = tmp_path / "report"
    result = _report_study([hostile["vanilla"], hostile["bgaugment"]], out)
    assert result.exit_code == 0, result.output
    written = {path.name: path.read_text(encoding="utf-8") for path in out.glob("*.md")}
    assert set(written) == {"study.md", "table.md", "seeds.md"}
    for run in (hostile["vanilla"], hostile["bgaugment"]):
        (report,) = run.glob("eval/*-test/report.md")
        written[f"{run.name}/report.md"] = report.read_text(encoding="utf-8")
    for name, markdown in written.items():
        assert_inert(markdown, name)
    study, report = written["study.md"], written[f"{hostile['vanilla'].name}/report.md"]
    assert study.startswith(
        "# &lt;script&gt;alert(5)&lt;/script&gt; \\*\\*study\\*\\* \\| \\[x\\](javascript:")
    assert "&lt;img src=x onerror=alert(3)&gt; run\\|a" in study  # the run folder, in the list of runs
    assert "/&lt;img src=y onerror=alert(2)&gt;.png |" in report  # an image, in the table of those hurt most
    from bgbias.report.markdown import text

    classes = report.split("classes hurt most")[1].split("\n## ")[0]
    for name in HOSTILE_CLASSES:  # each test class by its folder's name, as text, in the class table
        assert f"| {text(name)} (" in classes, name
    assert "alert(3)&gt; run\\|a" in written["table.md"]
    page = (out / "study.html").read_text(encoding="utf-8")
    assert "<script" not in page and "<img src=x" not in page and "&lt;script&gt;alert(5)" in page


@pytest.mark.slow
def test_the_gallery_takes_the_masks_and_dataset_the_explanation_recorded(hostile, tmp_path):
    out = tmp_path / "report"
    result = _report_study([hostile["vanilla"], hostile["bgaugment"]], out)
    assert result.exit_code == 0, result.output
    assert list(out.glob("foreground-*.png")) and "where " in (out / "study.md").read_text()
    # Without those masks the error names the folder recorded and the explain command, not an option report
    # does not have.
    runs = _copies(hostile, tmp_path)
    shutil.move(hostile["masks"], tmp_path / "moved-masks")
    try:
        failed = _report_study(runs, tmp_path / "other")
    finally:
        shutil.move(tmp_path / "moved-masks", hostile["masks"])
    assert failed.exit_code == 2, failed.output
    assert "Traceback" not in failed.output and str(hostile["masks"]) in failed.output
    assert f"bgbias explain --checkpoint {runs[0]} --masks DIR --force" in failed.output
    assert "pass --masks" not in failed.output


@pytest.mark.slow
def test_a_failed_report_leaves_the_older_one_as_it_was(hostile, tmp_path):
    runs = _copies(hostile, tmp_path)
    for run in runs:  # no galleries: this report needs no explanation
        shutil.rmtree(run / "explain")
    out = tmp_path / "report"
    first = _report_study(runs, out)
    assert first.exit_code == 0, first.output
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    assert {"study.html", "table.md", "seeds.md"} <= set(before)
    # The runs' numbers change, so new tables would differ; a run's training curves go into the page after the
    # tables are written: damaged, the page cannot be made.
    (report_json,) = runs[0].glob("eval/*-test/report.json")
    report = json.loads(report_json.read_text())
    report["clean"]["map_at_r"] = 0.5
    report_json.write_text(json.dumps(report))
    (runs[0] / "curves.png").write_bytes(b"not a png")
    second = _report_study(runs, out)
    assert second.exit_code == 2 and "curves.png" in second.output and "Traceback" not in second.output
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before
    assert sorted(path.name for path in out.parent.iterdir()) == ["report", "runs"]  # no half-written folder


@pytest.mark.slow
def test_a_report_never_replaces_a_folder_holding_other_files(hostile, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    result = CliRunner().invoke(main, ["report", "--out", str(mine), str(hostile["vanilla"])])
    assert result.exit_code == 2 and "notes.txt" in result.output
    assert [path.name for path in mine.iterdir()] == ["notes.txt"]


def test_a_report_folder_is_swapped_in_whole_with_the_users_umask(tmp_path):
    from bgbias.report.folder import RUNS_REPORT_FILES, write_report_folder

    def write(names):
        def files(stage):
            for name in names:
                (stage / name).write_text(name)
            return {name: stage / name for name in names}
        return files

    out = tmp_path / "report"
    write_report_folder(out, write(["table.md", "profile.csv"]), RUNS_REPORT_FILES)
    (out / ".DS_Store").write_text("a file browser's")
    previous = os.umask(0o022)
    try:
        files = write_report_folder(out, write(["table.md"]), RUNS_REPORT_FILES)
    finally:
        os.umask(previous)
    assert files == {"table.md": out / "table.md"} and sorted(p.name for p in out.iterdir()) == ["table.md"]
    assert stat.S_IMODE(out.stat().st_mode) == 0o755

    def fail(stage):
        (stage / "table.md").write_text("half")
        raise RuntimeError("a figure cannot be drawn")

    with pytest.raises(RuntimeError):
        write_report_folder(out, fail, RUNS_REPORT_FILES)
    assert (out / "table.md").read_text() == "table.md"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]
