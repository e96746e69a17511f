"""The intervals of an evaluation report (bgbias.measurement.confidence through summarize_evaluation and
summarize_profile) on generated scores whose answer is known, and how report.md and the console show them."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from bgbias.measurement.confidence import evaluation_confidence
from bgbias.measurement.intervals import IntervalSettings
from bgbias.measurement.record import evaluation_record
from bgbias.measurement.summary import HURT_MOST, PROFILE_SETS, summarize_evaluation, summarize_profile
from bgbias.report.console import format_evaluation_summary
from bgbias.report.evaluation import format_evaluation_markdown
from bgbias.retrieval.metrics import METRICS, RetrievalScores
from tests.report.synthetic import make_labels, make_run

LABELS = np.repeat(np.arange(8), 5)
META = {"method": "m", "dataset": "d", "split": "test"}


def _scores(level: float, seed: int, labels: np.ndarray = LABELS) -> RetrievalScores:
    """Per-query scores around ``level`` (NaN for a query alone in its class) with their means."""
    r = (np.bincount(labels)[labels] - 1).astype(np.int64)
    rng = np.random.default_rng(seed)
    per_query = {name: np.where(r > 0, np.clip(level + rng.normal(0, 0.1, len(r)), 0, 1), np.nan)
                 for name in METRICS}
    return RetrievalScores(*(float(np.nanmean(per_query[name])) for name in METRICS),
                           per_query={**per_query, "r": r}, scored=int((r > 0).sum()))


def _report(repeats: int = 3) -> dict:
    clean, corrupted, labels, ids = make_run(repeats)
    return summarize_evaluation(clean, corrupted, labels, ids, META)


def test_the_headline_intervals_hold_its_numbers_and_a_large_drop_excludes_0():
    report = _report()
    assert report["intervals"] == IntervalSettings().model_dump()
    sure = report["confidence"]
    for name in METRICS:
        clean, corrupted, drop = sure["clean"][name], sure["corrupted"][name], sure["drop"][name]
        assert clean["estimate"] == pytest.approx(report["clean"][name])
        assert corrupted["estimate"] == pytest.approx(report["corrupted"]["mean"][name])
        assert drop["difference"]["estimate"] == pytest.approx(report["drop"][name]["absolute"])
        for found in (clean, corrupted, drop["difference"]):
            assert found["low"] < found["estimate"] < found["high"] and found["level"] == 0.95
        assert drop["difference"]["low"] > 0 and drop["p_value"] < 0.01
        assert drop["queries"] == report["scored"]
    assert _report() == report  # seeded: the same scores give the same numbers
    typed = evaluation_record(report)
    assert typed.confidence.drop["map_at_r"].difference.holds(typed.drop["map_at_r"].absolute)


def test_a_drop_of_noise_has_an_interval_that_holds_0():
    clean, noise = _scores(0.5, 0), [_scores(0.5, seed) for seed in (1, 2)]
    report = summarize_evaluation(clean, noise, LABELS, [str(i) for i in range(len(LABELS))], {})
    for name in METRICS:
        drop = report["confidence"]["drop"][name]
        assert drop["difference"]["low"] < 0 < drop["difference"]["high"] and drop["p_value"] > 0.05


def test_a_clean_only_report_has_the_clean_intervals_alone():
    sure = _report(repeats=0)["confidence"]
    assert sure["corrupted"] is None and sure["drop"] is None
    assert all(sure["clean"][name]["low"] < sure["clean"][name]["high"] for name in METRICS)


def test_the_classes_hurt_most_carry_their_drop_interval_over_their_queries():
    report = _report()
    scored = [row for row in report["per_class"] if row["drop"] is not None]
    shown, rest = scored[:HURT_MOST], report["per_class"][HURT_MOST:]
    assert shown and rest
    for row in shown:
        interval = row["drop_interval"]
        assert interval["estimate"] == pytest.approx(row["drop"])
        assert interval["low"] <= row["drop"] <= interval["high"]
    assert all("drop_interval" not in row for row in rest)
    assert evaluation_record(report).per_class[0].drop_interval.estimate == pytest.approx(shown[0]["drop"])


def _profile(labels: np.ndarray = LABELS) -> dict:
    """The profile of generated scores: mixed-same well above mixed-rand, so the BG-gap is far from 0."""
    levels = {"repasted": 0.75, "only-fg": 0.6, "only-bg-tiled": 0.2, "only-bg-black": 0.1,
              "only-bg-inpainted": 0.2,
              "mixed-same": 0.7, "mixed-rand": 0.4}
    variants = {name: [_scores(level, 10 * index + draw, labels)
                       for draw in range(2 if name.startswith("mixed") else 1)]
                for index, (name, level) in enumerate(levels.items())}
    query_side = [_scores(0.45, 100 + draw, labels) for draw in range(2)]
    worst = {name: np.fmin(*(scores.per_query[name] for scores in query_side)) for name in METRICS}
    clean, corrupted = _scores(0.8, 200, labels), [_scores(0.4, 201 + draw, labels) for draw in range(2)]
    ids = [str(i) for i in range(len(labels))]
    found = evaluation_confidence(clean, corrupted,
                                  {"query-side": query_side, "worst-case": worst, **variants})
    report = summarize_evaluation(clean, corrupted, labels, ids, META, confidence=found.headline)
    assert report == summarize_evaluation(clean, corrupted, labels, ids, META)  # resampled alone: the same
    assert {name: None if drop is None else drop.model_dump() for name, drop in found.drop.items()} == report[
        "confidence"]["drop"]
    side = SimpleNamespace(scores=query_side, worst=worst, worst_k=2)
    report["profile"] = summarize_profile(clean, corrupted, side, variants, labels, [], [],
                                          intervals=found.rows, drop=found.drop)
    return report


def test_each_profile_row_has_its_interval_over_the_queries_and_its_draws():
    report = _profile()
    rows = {row["set"]: row for row in report["profile"]["sets"]}
    assert list(rows) == list(PROFILE_SETS)
    for name, row in rows.items():
        if name == "chance":  # no per-query scores
            assert row["interval"] is None
            continue
        for metric in METRICS:
            interval = row["interval"][metric]
            assert interval["estimate"] == pytest.approx(row["mean"][metric])
            assert interval["low"] < row["mean"][metric] < interval["high"]
    assert rows["clean"]["interval"] == report["confidence"]["clean"]
    assert rows["random-bg"]["interval"] == report["confidence"]["corrupted"]
    gap = rows["bg-gap"]
    assert gap["interval"]["map_at_r"]["low"] > 0.2 and gap["p_value"]["map_at_r"] < 0.01
    assert all(row.get("p_value") is None for name, row in rows.items() if name != "bg-gap")
    assert _profile() == report


def test_report_md_and_the_console_show_the_intervals():
    record = evaluation_record(_profile())
    text = format_evaluation_markdown(record)
    headline = text.split("\n\n")[1]
    assert headline.splitlines()[0].endswith("| relative drop (%) | p |")
    clean = record.confidence.clean["map_at_r"]
    assert (f"| MAP@R | {100 * clean.estimate:.2f} \\[{100 * clean.low:.2f}, {100 * clean.high:.2f}\\] |"
            in headline)
    assert "In brackets: 95 % intervals over the queries and the background draws (2,000 bootstrap " in text
    assert "not over training seeds" in text
    assert "| drop (points, interval) |" in text.split("classes hurt most")[1]
    gap = next(row for row in record.profile.sets if row.set == "bg-gap")
    shown = gap.interval["map_at_r"]
    assert f"\\[{100 * shown.low:.2f}, {100 * shown.high:.2f}\\]" in text.split("Background-reliance")[1]
    assert "The BG-gap's p-value of no gap (paired by query and draw): MAP@R &lt; 0.001" in text
    drop = record.confidence.drop["map_at_r"]
    summary = format_evaluation_summary(record, {})
    assert (f"MAP@R drop {drop.difference.estimate:.3f}, 95 % interval [{drop.difference.low:.3f}, "
            f"{drop.difference.high:.3f}] over queries and background draws, p < 0.001") in summary


def test_an_older_report_without_intervals_still_reads_and_renders():
    report = _report()
    for key in ("confidence", "intervals"):
        del report[key]
    for row in report["per_class"]:
        row.pop("drop_interval", None)
    text = format_evaluation_markdown(evaluation_record(report))
    assert "In brackets" not in text and "| relative drop (%) |\n" in text and "\\[" not in text


def test_with_queries_alone_in_their_class_every_class_shown_still_has_its_interval():
    labels = make_labels()
    report = _profile(labels)
    shown = [row for row in report["per_class"] if row["drop"] is not None][:HURT_MOST]
    assert all(row["drop_interval"] is not None for row in shown)
