"""The evaluation report: every number against numpy, lone queries left out, files that parse, same bytes."""

from __future__ import annotations

import csv
import json
import math
import statistics

import numpy as np
import pytest

from bgbias.errors import OptionError, RecordError
from bgbias.measurement.record import evaluation_record
from bgbias.measurement.summary import summarize_evaluation
from bgbias.report.evaluation import index_reports, load_evaluation_report, write_evaluation_report
from bgbias.retrieval.metrics import METRICS
from tests.report.hostile import HOSTILE_CLASSES, assert_inert
from tests.report.synthetic import changed, complete, make_labels, make_report, make_run, ranked_scores

META = {
    "run": "runs/cub-triplet-seed0",
    "method": "triplet",
    "bgaugment": True,
    "dataset": "cub",
    "split": "test",
    "checkpoint": {"path": "runs/cub-triplet-seed0/best.pt", "sha256": "ab" * 32, "epoch": 7},
    "pool": "backgrounds/test",
    "seeds": [11, 12, 13],
    "corrupted_sets": {"seed": 42,
                       "manifests": [{"repeat": 0, "sha256": "cd"}, {"repeat": 1, "sha256": "ef"}]},
}


def _summary(repeats: int = 3):
    clean, corrupted, labels, ids = make_run(repeats)
    return summarize_evaluation(clean, corrupted, labels, ids, META), (clean, corrupted, labels, ids)


def test_means_std_and_drop_match_numpy():
    report, (clean, corrupted, labels, _) = _summary()
    scored = ~np.isnan(clean.per_query["map_at_r"])
    assert report["format"] == "bgbias-eval-report" and report["version"] == 1
    assert {key: report[key] for key in META} == META
    assert (report["images"], report["classes"], report["scored"]) == (len(labels), 14, int(scored.sum()))
    assert report["scored"] == len(labels) - 1  # the one lone image
    for name in METRICS:
        clean_value = float(np.mean(clean.per_query[name][scored]))
        values = [float(np.mean(s.per_query[name][scored])) for s in corrupted]
        assert report["clean"][name] == pytest.approx(clean_value)
        assert [row[name] for row in report["corrupted"]["repeats"]] == pytest.approx(values)
        assert report["corrupted"]["mean"][name] == pytest.approx(np.mean(values))
        assert report["corrupted"]["std"][name] == pytest.approx(statistics.stdev(values))
        assert report["drop"][name]["absolute"] == pytest.approx(clean_value - np.mean(values))
        relative = (clean_value - np.mean(values)) / clean_value
        assert report["drop"][name]["relative"] == pytest.approx(relative)
    assert [row["repeat"] for row in report["corrupted"]["repeats"]] == [0, 1, 2]
    assert report["drop"]["map_at_r"]["absolute"] > 0  # the corrupted rankings are worse by construction
    json.dumps(report, allow_nan=False)


def test_per_class_values_leave_out_lone_queries_and_sort_by_drop():
    report, (clean, corrupted, labels, _) = _summary()
    expected = {}
    for label in set(labels.tolist()):
        members = [i for i in range(len(labels)) if labels[i] == label]
        if len(members) == 1:
            expected[label] = None
            continue
        clean_value = sum(clean.per_query["map_at_r"][i] for i in members) / len(members)
        per_repeat = [sum(s.per_query["map_at_r"][i] for i in members) / len(members) for s in corrupted]
        expected[label] = (clean_value, sum(per_repeat) / len(per_repeat))
    rows = report["per_class"]
    assert sorted(row["label"] for row in rows) == sorted(expected)
    for row in rows:
        assert row["images"] == int((labels == row["label"]).sum())
        if expected[row["label"]] is None:
            assert row["clean_map_at_r"] is row["corrupted_map_at_r"] is row["drop"] is None
            continue
        clean_value, corrupted_value = expected[row["label"]]
        assert row["clean_map_at_r"] == pytest.approx(clean_value)
        assert row["corrupted_map_at_r"] == pytest.approx(corrupted_value)
        assert row["drop"] == pytest.approx(clean_value - corrupted_value)
        if clean_value == 0:  # nothing to lose: no relative drop
            assert row["relative_drop"] is None
        else:
            assert row["relative_drop"] == pytest.approx((clean_value - corrupted_value) / clean_value)
    assert any(row["relative_drop"] is None and row["drop"] is not None for row in rows)
    drops = [row["drop"] for row in rows]
    assert drops[-1] is None and None not in drops[:-1]
    assert drops[:-1] == sorted(drops[:-1], reverse=True)


def test_images_hurt_most_are_the_largest_per_image_drops():
    report, (clean, corrupted, labels, ids) = _summary()
    after = np.mean([s.per_query["map_at_r"] for s in corrupted], axis=0)
    drop = clean.per_query["map_at_r"] - after
    hurt = report["images_hurt_most"]
    assert len(hurt) == 10
    assert [row["drop"] for row in hurt] == pytest.approx(sorted(drop[~np.isnan(drop)], reverse=True)[:10])
    for row in hurt:
        i = ids.index(row["id"])
        assert row["label"] == labels[i] and row["corrupted_map_at_r"] == pytest.approx(after[i])


def test_without_repeats_only_the_clean_part_and_one_repeat_has_no_std():
    report, _ = _summary(repeats=0)
    assert not {"corrupted", "drop", "per_class", "images_hurt_most"} & set(report)
    one, _ = _summary(repeats=1)
    assert one["corrupted"]["std"] == dict.fromkeys(METRICS)
    only = one["corrupted"]["repeats"][0]
    assert one["corrupted"]["mean"] == {name: only[name] for name in METRICS}


def test_a_split_of_lone_images_gives_none_not_nan():
    labels = np.array([1, 2, 3])
    scores = ranked_scores(labels, 0.0, 0)
    report = summarize_evaluation(scores, [scores, scores], labels, ["a", "b", "c"], {})
    assert report["clean"] == dict.fromkeys(METRICS)
    assert report["drop"]["map_at_r"] == {"absolute": None, "relative": None}
    json.dumps(report, allow_nan=False)


def test_mismatched_inputs_and_clashing_metadata_are_refused():
    clean, corrupted, labels, ids = make_run(2)
    with pytest.raises(OptionError, match="one label and one id per image"):
        summarize_evaluation(clean, corrupted, labels, ids[:-1], {})
    other = ranked_scores(make_labels(seed=5), 0.5, 0)
    with pytest.raises(OptionError, match="repeat 1"):
        summarize_evaluation(clean, [corrupted[0], other], labels, ids, {})
    with pytest.raises(OptionError, match="clean, scored"):
        summarize_evaluation(clean, corrupted, labels, ids, {"scored": 1, "clean": 2})


def _write(report, out_dir, clean, corrupted, labels, ids):
    """The report dict's typed record (checked here, once) written with its scores."""
    return write_evaluation_report(evaluation_record(report), out_dir, clean=clean, corrupted=corrupted,
                                   labels=labels, ids=ids)


def _read_csv(path):
    with path.open(newline="") as handle:
        return list(csv.reader(handle))


def test_written_files_parse_and_hold_the_numbers(tmp_path):
    report, (clean, corrupted, labels, ids) = _summary()
    paths = _write(report, tmp_path / "eval", clean, corrupted, labels, ids)
    assert set(paths) == {"report_json", "report_csv", "per_query_csv", "per_class_csv", "report_md"}
    assert json.loads(paths["report_json"].read_text()) == report
    assert load_evaluation_report(paths["report_json"]).model_dump(exclude_unset=True) == report

    table = _read_csv(paths["report_csv"])
    assert table[0] == ["set", *METRICS]
    assert [row[0] for row in table[1:]] == ["clean", "repeat-0", "repeat-1", "repeat-2", "mean", "std"]
    assert float(table[5][1]) == report["corrupted"]["mean"]["map_at_r"]
    assert float(table[6][3]) == report["corrupted"]["std"]["precision_at_1"]

    per_query = _read_csv(paths["per_query_csv"])
    assert per_query[0][:6] == ["id", "label", "r", "clean_map_at_r", "clean_r_precision",
                                "clean_precision_at_1"]
    assert per_query[0][-1] == "repeat2_precision_at_1" and len(per_query) == len(labels) + 1
    for i, row in enumerate(per_query[1:]):
        assert row[:3] == [ids[i], str(labels[i]), str(clean.per_query["r"][i])]
        if clean.per_query["r"][i] == 0:
            assert row[3:] == [""] * 12
        else:
            assert float(row[3]) == clean.per_query["map_at_r"][i]
            assert float(row[9]) == corrupted[1].per_query["map_at_r"][i]

    per_class = _read_csv(paths["per_class_csv"])
    assert per_class[0] == ["label", "name", "images", "empty_masks", "clean_map_at_r", "corrupted_map_at_r",
                            "drop", "relative_drop"]
    assert [int(row[0]) for row in per_class[1:]] == [row["label"] for row in report["per_class"]]
    assert [row[1] for row in per_class[1:]] == [str(row["label"]) for row in report["per_class"]]
    assert per_class[-1][3:] == ["", "", "", "", ""]


def test_markdown_prints_the_paper_style_numbers(tmp_path):
    report, (clean, corrupted, labels, ids) = _summary()
    paths = _write(report, tmp_path, clean, corrupted, labels, ids)
    text = paths["report_md"].read_text()
    title = text.splitlines()[0]
    assert title == "# triplet + BGAugment on cub, test split, checkpoint best.pt (epoch 7)"
    mean, std = report["corrupted"]["mean"]["map_at_r"], report["corrupted"]["std"]["map_at_r"]
    drop = report["drop"]["map_at_r"]
    sure = report["confidence"]
    shown = [_bracketed(found) for found in (sure["clean"]["map_at_r"], sure["corrupted"]["map_at_r"],
                                             sure["drop"]["map_at_r"]["difference"])]
    expected_row = (f"| MAP@R | {100 * report['clean']['map_at_r']:.2f} {shown[0]} | {100 * mean:.2f} ± "
                    f"{100 * std:.2f} {shown[1]} | {100 * drop['absolute']:.2f} {shown[2]} | "
                    f"{100 * drop['relative']:.2f} | &lt; 0.001 |")
    assert expected_row in text
    assert "In brackets: 95 % intervals over the queries and the background draws" in text
    assert "mean ± std over 3 repeats" in text
    assert "- pool: backgrounds/test" in text and "- seeds: 11, 12, 13" in text
    assert "- checkpoint:\n  - epoch: 7\n  - path: runs/cub-triplet-seed0/best.pt\n  - sha256: " in text
    assert "- corrupted_sets:\n  - manifests:\n    - repeat 0, sha256 cd\n    - repeat 1, sha256 ef\n" in text
    assert "  - seed: 42\n" in text
    hurt_section = text.split("classes hurt most")[1].split("##")[0]
    class_rows = [line for line in hurt_section.splitlines() if line.startswith("| ")][1:]
    assert len(class_rows) == 10
    for line, row in zip(class_rows, report["per_class"], strict=False):
        interval = row["drop_interval"]
        assert line.startswith(f"| {row['label']} | {row['images']} | {100 * row['clean_map_at_r']:.2f} |")
        assert f"| {100 * row['drop']:.2f} {_bracketed(interval)} |" in line
    assert str(report["per_class"][10]["label"]) not in [line.split("|")[1].strip() for line in class_rows]


def _bracketed(interval):
    """An interval as report.md shows it after its number, in %."""
    return f"\\[{100 * interval['low']:.2f}, {100 * interval['high']:.2f}\\]"


def test_markdown_without_repeats_has_only_clean_scores(tmp_path):
    report, (clean, corrupted, labels, ids) = _summary(repeats=0)
    paths = _write(report, tmp_path, clean, corrupted, labels, ids)
    assert "per_class_csv" not in paths
    text = paths["report_md"].read_text()
    assert "| metric | clean (%) |\n" in text and "corrupted (%" not in text and "hurt most" not in text
    assert [row[0] for row in _read_csv(paths["report_csv"])] == ["set", "clean"]


def test_same_input_same_bytes(tmp_path):
    written = []
    for name in ("a", "b"):
        report, (clean, corrupted, labels, ids) = _summary()
        written.append(_write(report, tmp_path / name, clean, corrupted, labels, ids))
    for key, path in written[0].items():
        assert path.read_bytes() == written[1][key].read_bytes(), key


def test_writing_other_scores_than_the_report_was_made_from_is_refused(tmp_path):
    report, (clean, corrupted, labels, ids) = _summary()
    with pytest.raises(OptionError, match="not the ones the report was made from"):
        _write(report, tmp_path, clean, corrupted[:2], labels, ids)


def test_metadata_of_another_type_than_the_report_declares_writes_nothing(tmp_path):
    clean, corrupted, labels, ids = make_run(2)
    report = summarize_evaluation(clean, corrupted, labels, ids, {**META, "seed": "0"})
    with pytest.raises(RecordError, match='field seed must be an integer or null, got "0"'):
        _write(report, tmp_path / "eval", clean, corrupted, labels, ids)
    assert not (tmp_path / "eval").exists()


def test_loading_a_bad_report_names_the_file_and_the_fix(tmp_path):
    with pytest.raises(OptionError, match="no evaluation report") as missing:
        load_evaluation_report(tmp_path / "report.json")
    assert "bgbias eval" in str(missing.value) and "report.json" in str(missing.value)
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(RecordError, match="not valid JSON"):
        load_evaluation_report(path)


def test_reports_are_keyed_by_run_identity_and_duplicates_name_both_runs(tmp_path):
    a = complete(make_report("triplet", False, "cub"))
    b = complete(make_report("triplet", True, "cub"))
    assert a.key == ("triplet", False, "cub", "test")
    assert list(index_reports([a, b]).values()) == [a, b]
    twin = changed(a, run="runs/elsewhere")
    with pytest.raises(OptionError, match=r"runs/cub-triplet-0 and runs/elsewhere"):
        index_reports([a, b, twin])
    path = tmp_path / "report.json"
    unsplit = {k: v for k, v in make_report("triplet", False, "cub").items() if k != "split"}
    path.write_text(json.dumps(unsplit))
    with pytest.raises(RecordError, match="field split must be a string, got nothing"):
        load_evaluation_report(path)
    assert math.isclose(a.clean.map_at_r, b.clean.map_at_r)


def _written_markdown(tmp_path, **options):
    clean, corrupted, labels, ids = make_run(3)
    report = summarize_evaluation(clean, corrupted, labels, ids, META, **options)
    paths = _write(report, tmp_path, clean, corrupted, labels, ids)
    return report, paths, paths["report_md"].read_text(encoding="utf-8")


def test_classes_are_shown_by_the_names_the_dataset_gives_them_as_text(tmp_path):
    names = {10 + index: name for index, name in enumerate(HOSTILE_CLASSES)} | {14: "galaxy"}
    report, paths, text = _written_markdown(tmp_path, class_names=names)
    assert_inert(text, "report.md")
    assert {row["label"]: row["name"] for row in report["per_class"]}[14] == "galaxy"
    assert all(row["class_name"] == names.get(row["label"], str(row["label"]))
               for row in report["images_hurt_most"])
    shown = [line.split(" | ")[0].removeprefix("| ") for line in text.splitlines() if line.startswith("| ")]
    listed = [row["label"] for row in report["per_class"] if row["drop"] is not None][:10]
    assert len(set(listed) & set(names)) >= 3
    for label, name in names.items():
        if label in listed:
            assert any(cell.startswith(markdown_text(name)) for cell in shown), name
    per_class = _read_csv(paths["per_class_csv"])
    assert {int(row[0]): row[1] for row in per_class[1:]}[11] == HOSTILE_CLASSES[1]


def markdown_text(name):
    from bgbias.report.markdown import text

    return text(name, starts_block=False)


def test_report_md_gives_the_headline_then_the_classes_and_the_setup_last(tmp_path):
    _, _, text = _written_markdown(tmp_path, class_names={}, empty_masks=[])
    headings = [line for line in text.splitlines() if line.startswith("#")]
    assert headings[0].startswith("# triplet + BGAugment")
    assert headings[1:] == ["## The 10 classes hurt most (MAP@R, %)", "## The 10 images hurt most (MAP@R, %)",
                            "## Setup"]
    assert text.index("| MAP@R |") < text.index("classes hurt most") < text.index("- pool: backgrounds/test")
    assert "Empty saliency masks: none" in text.split("##")[0]


def test_empty_masks_are_flagged_per_class_and_image_and_the_headline_given_without_them(tmp_path):
    clean, corrupted, labels, ids = make_run(3)
    galaxy = [ids[i] for i in np.flatnonzero(labels == 12)]  # a whole class: u2netp found nothing
    stray = ids[int(np.flatnonzero(labels == 10)[0])]
    empty = [*galaxy, stray]
    report, paths, text = _written_markdown(tmp_path, class_names={12: "galaxy"}, empty_masks=empty)
    record = report["empty_masks"]
    assert record["images"] == len(empty) == 6 and record["ids"] == [i for i in ids if i in empty]
    counts = {row["label"]: row["empty_masks"] for row in report["per_class"]}
    assert counts[12] == 5 and counts[10] == 1 and sum(counts.values()) == 6
    kept = ~np.isin(ids, empty)
    for name in METRICS:
        clean_value = np.nanmean(clean.per_query[name][kept])
        corrupted_value = np.mean([np.nanmean(s.per_query[name][kept]) for s in corrupted])
        assert record["without"]["clean"][name] == pytest.approx(clean_value)
        assert record["without"]["corrupted"][name] == pytest.approx(corrupted_value)
        assert record["without"]["drop"][name]["absolute"] == pytest.approx(clean_value - corrupted_value)
    assert record["without"]["scored"] == int((kept & ~np.isnan(clean.per_query["map_at_r"])).sum())
    assert all(row["empty_mask"] == (row["id"] in empty) for row in report["images_hurt_most"])

    headline = text.split("\n## ")[0]
    assert "**6 of 41 images have a saliency mask that shows no object** (2 classes, 1 of them entirely)" in (
        headline)
    assert "without the images whose masks are empty" in headline and "scored as every image is" in headline
    sections = text.split("\n## ")
    classes = next(section for section in sections if section.startswith("Classes with empty masks"))
    assert classes.index("| galaxy (12) | 5 | 5 |") < classes.index("| 10 | 4 | 1 |")
    images = next(section for section in sections if section.startswith("Images with empty masks"))
    assert all(f"`{image}`" in images for image in empty)
    per_query = _read_csv(paths["per_query_csv"])
    assert per_query[0][3] == "empty_mask"
    assert [row[0] for row in per_query[1:] if row[3] == "True"] == record["ids"]
    per_class = {int(row[0]): row[3] for row in _read_csv(paths["per_class_csv"])[1:]}
    assert per_class[12] == "5" and per_class[11] == "0"
    read = load_evaluation_report(paths["report_json"])
    assert read.empty_masks.without.scored == record["without"]["scored"]


def test_a_corrupted_score_whose_masks_were_not_checked_says_so(tmp_path):
    report, paths, text = _written_markdown(tmp_path)
    assert "empty_masks" not in report and "Empty saliency masks: not checked" in text
    assert "empty_mask" not in _read_csv(paths["per_query_csv"])[0]
