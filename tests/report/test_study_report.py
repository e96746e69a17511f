"""The study report: Table 1 over seeds side by side, rankings, the mechanism check against the reference
losses, Table 2 over seeds, model selection against the watched test scores, and the page itself."""

from __future__ import annotations

import json

import pytest

from bgbias.figures import save_png
from bgbias.report.study_report import (
    StudyRunResult,
    answers,
    bgaugment_comparisons,
    comparison_table,
    foreground_scores,
    mechanisms,
    plot_over_seeds,
    rankings,
    selection_summary,
    selection_table,
    selections,
    side_by_side,
    write_study_report,
)
from tests.ink import edge_ink
from tests.report.synthetic import changed, complete, explain_summary, write_evaluation, write_run_record


def _report(method, bgaugment, seed, clean, corrupted):
    return complete({
        "method": method, "bgaugment": bgaugment, "seed": seed, "dataset": "bench", "split": "test",
        "run": f"runs/{method}-{bgaugment}-{seed}", "checkpoint": {"epoch": 2},
        "clean": {"map_at_r": clean, "precision_at_1": clean + 0.2},
        "corrupted": {"mean": {"map_at_r": corrupted, "precision_at_1": corrupted + 0.1},
                      "std": {"map_at_r": 0.01}},
        "drop": {"map_at_r": {"absolute": clean - corrupted,
                              "relative": (clean - corrupted) / clean if clean else None}},
        "per_class": [{"label": c, "relative_drop": d} for c, d in enumerate((0.2, 0.5, 0.9))],
    })


REPORTS = [
    _report("ms", False, 0, 0.60, 0.20), _report("ms", False, 1, 0.62, 0.22),
    _report("ms", True, 0, 0.58, 0.40), _report("ms", True, 1, 0.56, 0.40),
    _report("dcml", False, 0, 0.70, 0.60), _report("dcml", False, 1, 0.70, 0.62),
    _report("dcml", True, 0, 0.66, 0.50),
]


def test_table_one_puts_vanilla_and_bgaugment_side_by_side_over_seeds():
    headers, rows = side_by_side(REPORTS)
    row = dict(zip(headers, rows[0], strict=True))
    # A count and the ids: a lone seed 0 shown as "0" reads as no seeds (issue 35).
    assert row["method"] == "ms" and row["training seeds"] == "2 (0, 1)"
    assert dict(zip(headers, side_by_side(REPORTS[:1])[1][0], strict=True))["training seeds"] == "1 (0)"
    assert row["vanilla clean"] == "61.00 ± 1.41" and row["BGAugment corrupted"] == "40.00 ± 0.00"
    assert row["vanilla drop (%)"] == "65.6 ± 1.5"  # 66.67 and 64.52
    assert dict(zip(headers, rows[1], strict=True))["BGAugment clean"] == "66.00"  # one seed: no std


def test_rankings_order_by_corrupted_best_first_and_by_drop_smallest_first():
    ranked = rankings(REPORTS)
    assert [row[1] for row in ranked["corrupted MAP@R"][1]] == [
        "dcml", "dcml + BGAugment", "ms + BGAugment", "ms"]
    assert next(row[1] for row in ranked["relative drop (%)"][1]) == "dcml"
    assert ranked["corrupted MAP@R"][1][0][0] == "1"


def test_a_method_is_compared_with_the_reference_losses_against_the_seed_spread():
    _headers, rows = mechanisms(REPORTS, reference=["ms"])
    (row,) = rows
    assert row[0] == "dcml" and row[-1] == "smaller drop" and float(row[3]) < -50
    assert mechanisms(REPORTS[:1] + REPORTS[4:5], reference=["ms"])[1][0][-1] == "n/a (one seed)"


def test_foreground_scores_are_means_over_seeds_per_attribution(tmp_path):
    def key(report, label):
        return report.method, report.bgaugment, "bench", label

    def score(mean):
        return explain_summary("bench", mean, None)

    results = [StudyRunResult(tmp_path, report, {key(report, "smoothgrad"): score(0.1 + 0.1 * report.seed)})
               for report in REPORTS]
    results[-1] = StudyRunResult(tmp_path, REPORTS[-1], {key(REPORTS[-1], "avsl"): score(0.3)})
    _headers, rows = foreground_scores(results)
    assert rows[0] == ("ms", "smoothgrad", "0.150 ± 0.071", "0.150 ± 0.071")
    assert ("dcml", "avsl", "", "0.300") in rows


def _watched_run(folder, monitor, best_epoch, test, corrupted):
    folder.mkdir(parents=True)
    rows = [{"epoch": e, "val_map_at_r": 0.5, "test_map_at_r": t, "test_corrupted_map_at_r": c}
            for e, (t, c) in enumerate(zip(test, corrupted, strict=True))]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    write_run_record(folder, best_epoch=best_epoch, monitor=monitor)
    return folder


def test_selection_is_scored_against_the_best_epoch_in_hindsight(tmp_path):
    vanilla = _watched_run(tmp_path / "ms-seed0", "val_map_at_r", 1, [0.5, 0.6, 0.7], [0.2, 0.3, 0.2])
    augmented = _watched_run(tmp_path / "ms-bgaugment-seed0", "val_corrupted_map_at_r", 2, [0.5, 0.6, 0.5],
                             [0.2, 0.3, 0.3])
    unwatched = tmp_path / "plain"
    unwatched.mkdir()
    (unwatched / "metrics.jsonl").write_text(json.dumps({"epoch": 0, "val_map_at_r": 0.5}) + "\n")
    found = selections([vanilla, augmented, unwatched])
    assert [s.run for s in found] == ["ms-seed0", "ms-bgaugment-seed0"]
    assert round(found[0].cost("test_map_at_r"), 6) == 0.1 and found[0].best_epoch["test_map_at_r"] == 2
    assert found[1].cost("test_corrupted_map_at_r") == 0  # epochs 1 and 2 tie: the earlier is "best"
    headers, rows = selection_table(found)
    assert dict(zip(headers, rows[0], strict=True))["clean: best (epoch)"] == "70.00 (2)"
    text = selection_summary(found, REPORTS)
    assert "5.00 points (at most 10.00)" in text and "std over training seeds" in text
    assert "not measured" in selection_summary([], REPORTS)


def _with_evaluations(tmp_path, profiled=False):
    """REPORTS as study results, the evaluation folders of ms seed 0 written: vanilla at chance, BGAugment
    ranking right (dcml's lack theirs, as results put together by hand do); ``profiled``: with the paste
    control ranking right in both, so vanilla's background effect is large and BGAugment's small."""
    results = [StudyRunResult(tmp_path / f"run{i}", report, {}) for i, report in enumerate(REPORTS)]
    for index in (0, 2):
        pull = 5.0 * REPORTS[index].bgaugment
        evaluation = write_evaluation(tmp_path / f"run{index}" / "eval" / "bench-test", pull=pull, seed=index,
                                      repasted=5.0 if profiled else None)
        results[index] = StudyRunResult(results[index].folder, REPORTS[index], {}, evaluation)
    return results


def test_bgaugment_is_compared_with_vanilla_per_seed_over_the_test_queries(tmp_path):
    results = _with_evaluations(tmp_path)
    (found,) = bgaugment_comparisons(results)  # ms seed 0: the one pair whose folders are known
    assert (found.method, found.seed) == ("ms", 0)
    assert found.map_at_r.corrupted.difference.low > 0 and found.map_at_r.corrupted.p_value < 0.01
    headers, (row,) = comparison_table([found])
    cells = dict(zip(headers, row, strict=False))
    assert cells["method"] == "ms" and cells["training seed"] == "0"
    assert cells["Δ corrupted MAP@R [95 %]"].startswith("+") and cells["background draws"] == "paired by draw"
    assert row[3] == "< 0.001"  # the corrupted difference's p-value: the smallest 2000 resamples give
    assert bgaugment_comparisons(results[1:]) == []  # no vanilla run of seed 0 any more
    assert "Δ background effect [95 %]" not in headers  # neither run profiled: the table as before


def test_the_comparison_shows_the_background_effect_where_both_runs_were_profiled(tmp_path):
    (found,) = bgaugment_comparisons(_with_evaluations(tmp_path, profiled=True))
    effect = found.map_at_r.background_effect
    headers, (row,) = comparison_table([found])
    cells = dict(zip(headers, row, strict=False))
    assert headers.index("Δ background effect [95 %]") == headers.index("Δ drop [95 %]") + 2
    assert cells["Δ background effect [95 %]"] == f"{100 * effect.difference.estimate:+.2f} [" \
        f"{100 * effect.difference.low:+.2f}, {100 * effect.difference.high:+.2f}]"
    assert row[headers.index("Δ background effect [95 %]") + 1] == "< 0.001"  # BGAugment's far smaller
    assert effect.difference.high < 0 and cells["background draws"] == "paired by draw"


@pytest.mark.slow
def test_the_page_is_written_as_markdown_and_html(tmp_path):
    results = _with_evaluations(tmp_path)
    paths = write_study_report(results, tmp_path / "report", title="a study", reference=["ms"])
    markdown = paths["study_md"].read_text()
    assert "## BGAugment's effect over test queries and background draws, one training seed" in markdown
    assert "## BGAugment's effect over training seeds, paired by seed" in markdown
    assert "| ms | 0 | +" in markdown and "percentile bootstrap" in markdown
    assert "background effect" not in markdown  # no run profiled: the comparison as before
    profiled = write_study_report(_with_evaluations(tmp_path / "profiled", profiled=True),
                                  tmp_path / "profiled" / "report", title="a study", reference=["ms"])
    assert "| Δ drop \\[95 %\\] | p | Δ background effect \\[95 %\\] | p | background draws |" in \
        profiled["study_md"].read_text()
    assert "<th>Δ background effect [95 %]</th>" in profiled["study_html"].read_text()
    bare = [StudyRunResult(tmp_path / f"run{i}", report, {}) for i, report in enumerate(REPORTS)]
    alone = write_study_report(bare, tmp_path / "bare", title="a study", reference=["ms"])["study_md"]
    assert "Not measured: this needs a method's vanilla and BGAugment runs" in alone.read_text()
    assert markdown.startswith("# a study") and "![per-class relative drop" in markdown
    assert "![clean and corrupted MAP@R without and with BGAugment" in markdown
    assert "| dcml | within the spread" not in markdown and "smaller drop" in markdown
    page = paths["study_html"].read_text()
    assert "data:image/png;base64," in page and "https://" not in page
    assert "Failed runs" not in markdown


@pytest.mark.slow
def test_the_page_names_the_runs_that_failed(tmp_path):
    results = [StudyRunResult(tmp_path / f"run{i}", report, {}) for i, report in enumerate(REPORTS)]
    failures = {"dcml-bgaugment-seed1": "the loss became nan at epoch 3, step 7\n  fix:  lower the rates"}
    paths = write_study_report(results, tmp_path / "report", title="a study", reference=["ms"],
                               failures=failures)
    markdown = paths["study_md"].read_text()
    assert "## Failed runs" in markdown
    assert "- `dcml-bgaugment-seed1`: the loss became nan at epoch 3, step 7" in markdown


def test_the_profile_is_aggregated_over_seeds_set_by_set():
    from bgbias.report.study_report import PROFILE_SUMMARY, profile_over_seeds

    def profiled(report, only_bg):
        sets = [{"set": name, "title": name, "repeats": 1,
                 "mean": {"map_at_r": 0.1, "r_precision": None, "precision_at_1": None},
                 "std": {"map_at_r": None, "r_precision": None, "precision_at_1": None}}
                for name in PROFILE_SUMMARY]
        sets[PROFILE_SUMMARY.index("only-bg-tiled")]["mean"]["map_at_r"] = only_bg
        return changed(report, profile={"sets": sets, "worst_k": 1, "only_fg_fill": []})

    reports = [profiled(REPORTS[0], 0.30), profiled(REPORTS[1], 0.40), REPORTS[2]]
    headers, rows = profile_over_seeds(reports)
    (row,) = rows  # the BGAugment run has no profile
    cells = dict(zip(headers, row, strict=True))
    assert cells["run"] == "ms" and cells["seeds"] == "2" and cells["only-bg-tiled"] == "35.00 ± 7.07"
    assert cells["only-bg-inpainted"] == "10.00 ± 0.00"
    assert cells["paste cost"] == cells["background effect"] == "–"  # profiled before the paste control


def test_the_drop_split_by_the_paste_control_is_aggregated_over_seeds():
    from bgbias.report.study_report import PROFILE_SUMMARY, profile_over_seeds
    from tests.report.synthetic import decomposed, make_run

    def profiled(report, seed):
        clean, corrupted, _, _ = make_run(2, seed)
        parts = decomposed(clean, corrupted, [corrupted[0]])
        sets = [{"set": name, "title": name, "repeats": 1,
                 "mean": {"map_at_r": 0.1, "r_precision": None, "precision_at_1": None},
                 "std": {"map_at_r": None, "r_precision": None, "precision_at_1": None}}
                for name in PROFILE_SUMMARY]
        decomposition = {metric: part.model_dump() for metric, part in parts.items()}
        return changed(report, profile={"sets": sets, "worst_k": 1, "only_fg_fill": [],
                                        "decomposition": decomposition}), parts["map_at_r"]

    (first, one), (second, two) = profiled(REPORTS[0], 0), profiled(REPORTS[1], 5)
    headers, rows = profile_over_seeds([first, second, REPORTS[2]])
    assert headers[2] == "repasted" and headers[-2:] == ("paste cost", "background effect")
    cells = dict(zip(headers, rows[0], strict=True))
    costs = [100 * parts.paste_cost.difference.estimate for parts in (one, two)]
    assert float(cells["paste cost"].split(" ± ")[0]) == pytest.approx(sum(costs) / 2, abs=0.005)
    assert cells["background effect"].count(" ± ") == 1


def test_profiles_recorded_before_the_inpainted_variant_show_it_as_not_measured():
    from bgbias.report.study_report import PROFILE_SUMMARY, profile_over_seeds

    def profiled(report, names):
        sets = [{"set": name, "title": name, "repeats": 1,
                 "mean": {"map_at_r": 0.2, "r_precision": None, "precision_at_1": None},
                 "std": {"map_at_r": None, "r_precision": None, "precision_at_1": None}} for name in names]
        return changed(report, profile={"sets": sets, "worst_k": 1, "only_fg_fill": []})

    older = [name for name in PROFILE_SUMMARY if name != "only-bg-inpainted"]
    reports = [profiled(REPORTS[0], older), profiled(REPORTS[1], older), profiled(REPORTS[2], older),
               profiled(REPORTS[3], PROFILE_SUMMARY)]
    headers, rows = profile_over_seeds(reports)
    vanilla, bgaugment = (dict(zip(headers, row, strict=True)) for row in rows)
    assert vanilla["only-bg-inpainted"] == "–" and vanilla["only-bg-tiled"] == "20.00 ± 0.00"
    # One seed of two has it: the cell is that seed's, as the seeds column counts the profiled runs.
    assert bgaugment["only-bg-inpainted"] == "20.00"


def test_the_three_questions_are_answered_from_the_runs_with_the_seed_spread():
    (_, lost), (_, bgaugment), (_, mechanism) = answers(REPORTS, reference=["ms"])
    assert lost.endswith(
        "The vanilla runs of all 2 methods lose 9.0 to 40.0 points of MAP@R, 12.9 % (dcml) to 65.6 % (ms) of "
        "their clean score. The loss differs from zero by more than twice its std over seeds for every "
        "method.")
    # dcml has one BGAugment run: its paired effect has no spread, and the answer says so.
    assert "changes corrupted MAP@R by -10.0 to +19.0 points for all 2 methods" in bgaugment
    assert bgaugment.endswith("for ms, the one method with several seeds; dcml had one seed.")
    assert mechanism.endswith("(ms; 65.6 ± 1.5 % over their seeds), beyond twice the standard error of the "
                              "difference: smaller drop: dcml (-52.7 points).")
    (_, lost_by_one), (_, gained_by_one), _ = answers([r for r in REPORTS if r.method == "ms"], ["ms"])
    assert lost_by_one.startswith(" The vanilla runs of ms lose 40.0 points of MAP@R, 65.6 % of their clean ")
    assert "changes corrupted MAP@R by +19.0 points for ms," in gained_by_one
    one_seed = answers([r for r in REPORTS if r.seed == 0], reference=["ms"])
    assert all("seed spread is not known" in text or "n/a (one seed)" in text for _, text in one_seed)
    assert "Not measured" in answers([r for r in REPORTS if r.bgaugment], reference=["ms"])[0][1]
    # Without a reference loss's runs the mechanism is not measured, and the answer says what is missing.
    assert "runs of at least one reference loss" in answers(REPORTS, reference=["triplet"])[2][1]


def test_a_consistent_loss_of_corrupted_map_from_bgaugment_is_beyond_the_spread_as_the_table_says():
    reports = [_report("ms", False, 0, 0.60, 0.40), _report("ms", False, 1, 0.60, 0.41),
               _report("ms", True, 0, 0.60, 0.35), _report("ms", True, 1, 0.60, 0.355)]
    assert answers(reports, reference=["ms"])[1][1].endswith(
        "The gain differs from zero by more than twice its std over seeds for every method.")


@pytest.mark.slow
def test_the_one_seed_figures_take_the_smallest_seed_present(tmp_path):
    from bgbias.report.study_report import first_seed

    results = [StudyRunResult(tmp_path / f"run{i}", report, {}) for i, report in enumerate(REPORTS)
               if report.seed == 1]
    seed, first = first_seed(results)
    assert seed == 1 and len(first) == 3
    markdown = write_study_report(results, tmp_path / "report", title="t", reference=["ms"])["study_md"]
    assert "per-class relative drop of MAP@R, training seed 1" in markdown.read_text()


def test_a_run_without_any_foreground_score_leaves_its_cell_empty(tmp_path):
    key = ("bench", "test", "bench", "smoothgrad")
    results = [StudyRunResult(tmp_path / "a", REPORTS[0], {key: explain_summary("bench", None, None)}),
               StudyRunResult(tmp_path / "b", REPORTS[2], {key: explain_summary("bench", 0.25, None)})]
    assert foreground_scores(results)[1] == (("ms", "smoothgrad", "", "0.250"),)


@pytest.mark.slow
def test_the_seed_plot_is_stable_and_draws_each_seed(tmp_path):
    # dcml has no BGAugment run of seed 1 and one report has no corrupted repeats: both still draw.
    reports = [*REPORTS, changed(_report("ms", False, 2, 0.61, 0.2), corrupted=None)]
    first = plot_over_seeds(reports, tmp_path / "a.png").read_bytes()
    assert first.startswith(b"\x89PNG") and plot_over_seeds(reports, tmp_path / "b.png").read_bytes() == first
    moved = [_report("dcml", False, 1, 0.70, 0.30) if r is REPORTS[5] else r for r in reports]
    assert plot_over_seeds(moved, tmp_path / "c.png").read_bytes() != first


def test_a_method_whose_clean_score_is_zero_loses_points_but_has_no_relative_drop():
    # An untrained or diverged run scores 0 clean: its relative drop is undefined, and the answer is still
    # written (a study's page must not fail on one degenerate run).
    reports = [_report("ms", bgaugment, seed, 0.0, 0.0) for seed in (0, 1) for bgaugment in (False, True)]
    (_, lost), (_, gained), _ = answers(reports, reference=["ms"])
    assert lost.startswith(" The vanilla runs of ms lose 0.0 points of MAP@R. ")
    assert gained.startswith(" Paired by seed, BGAugment changes corrupted MAP@R by +0.0 points for ms and "
                             "clean MAP@R by +0.0 points.")


@pytest.mark.slow
@pytest.mark.parametrize("methods", [1, 10])
def test_the_seed_plot_holds_its_whole_title_and_every_legend_entry(tmp_path, monkeypatch, methods):
    # The quick preset's one-method chart was cut at both sides: "…rs: mean over training seeds; dots: one",
    # a legend of "nilla, corrupted" and "BGAugment, clean" only (issue 35).
    from bgbias.report import study_report

    saved = []
    monkeypatch.setattr(study_report, "save_png", lambda figure, path: saved.append(figure) or
                        save_png(figure, path))
    reports = [_report(f"method{index}", bgaugment, seed, 0.6, 0.3)
               for index in range(methods) for bgaugment in (False, True) for seed in (0, 1)]
    png = plot_over_seeds(reports, tmp_path / "over-seeds.png").read_bytes()
    (figure,) = saved
    canvas = figure.bbox
    texts = [*figure.legends[0].get_texts(), figure.axes[0].title]
    assert [text.get_text() for text in figure.legends[0].get_texts()] == [
        "vanilla, clean", "vanilla, corrupted", "BGAugment, clean", "BGAugment, corrupted"]
    for text in texts:
        extent = text.get_window_extent()
        assert canvas.x0 <= extent.x0 and extent.x1 <= canvas.x1, text.get_text()
    assert edge_ink(png) == (0, 0)


def test_the_answers_name_a_lone_method_and_count_the_others_in_words():
    # "the vanilla runs of all 1 methods" (issue 35): one method is named, several are counted with a noun.
    only_bgaugment = [_report("dcml", True, 0, 0.7, 0.5)]
    (_, lost), _, _ = answers([*REPORTS[:4], *only_bgaugment], reference=["ms"])
    assert lost.startswith(" The vanilla runs of ms lose ")
    three_of_four = [_report(method, bgaugment, seed, 0.6, 0.3) for method in ("a", "b", "c", "d")
                     for bgaugment in (False, True) for seed in (0, 1) if method != "d" or bgaugment]
    (_, lost), (_, gained), _ = answers(three_of_four, reference=["a"])
    assert lost.startswith(" The vanilla runs of 3 of the 4 methods lose ")
    assert "for 3 of the 4 methods" in gained


@pytest.mark.slow
def test_the_page_says_when_runs_were_scored_with_empty_masks(tmp_path):
    empty = {"images": 2, "ids": ["a.jpg", "b.jpg"]}
    flagged = [changed(report, images=40, empty_masks=empty) if report.bgaugment else report
               for report in REPORTS]
    results = [StudyRunResult(tmp_path / f"run{i}", report, {}) for i, report in enumerate(flagged)]
    markdown = write_study_report(results, tmp_path / "report", title="t", reference=["ms"])["study_md"]
    head = markdown.read_text().split("\n## ")[0]
    assert ("**Images whose saliency mask shows no object (2 of 40 images) in the evaluations of 3 of the 7 "
            "runs**") in head
    results = [StudyRunResult(tmp_path / f"run{i}", report, {}) for i, report in enumerate(REPORTS)]
    clear = write_study_report(results, tmp_path / "clear", title="t", reference=["ms"])["study_md"]
    assert "shows no object" not in clear.read_text()


@pytest.mark.slow
def test_the_page_says_which_masks_the_runs_were_scored_with_and_what_made_them(tmp_path):
    maker = {"model": "u2netp", "backend": "torch", "precision": "fp32", "provider": "cuda:0"}
    sets = {"seed": 0, "pool": "backgrounds/test", "masks": "masks/bench-u2netp", "mask_maker": maker}
    results = [StudyRunResult(tmp_path / f"run{i}", changed(report, corrupted_sets=sets), {})
               for i, report in enumerate(REPORTS)]
    markdown = write_study_report(results, tmp_path / "one", title="t", reference=["ms"])["study_md"]
    head = markdown.read_text().split("\n## ")[0]
    assert "Masks of the corrupted sets: `masks/bench-u2netp` (u2netp, torch fp32 on cuda:0)." in head

    hostile = {**sets, "mask_maker": {**maker, "model": "<script>alert(1)</script>"}}
    users = {**sets, "mask_maker": None}
    mixed = [changed(report, corrupted_sets=hostile if report.bgaugment else users) for report in REPORTS]
    results = [StudyRunResult(tmp_path / f"run{i}", report, {}) for i, report in enumerate(mixed)]
    paths = write_study_report(results, tmp_path / "mixed", title="t", reference=["ms"])
    markdown = paths["study_md"].read_text()
    assert "evaluated with different ones" in markdown
    assert "(no bgbias masks manifest (the dataset's own masks, or a user's)): 4 runs" in markdown
    page = paths["study_html"].read_text()
    assert "<script>" not in markdown and "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;, torch fp32 on cuda:0): 3 runs" in page


@pytest.mark.slow
def test_a_clean_only_study_says_nothing_of_masks(tmp_path):
    results = [StudyRunResult(tmp_path / f"run{i}", report, {}) for i, report in enumerate(REPORTS)]
    markdown = write_study_report(results, tmp_path / "report", title="t", reference=["ms"])["study_md"]
    assert "Masks of the corrupted sets" not in markdown.read_text()
