"""``bgbias.audit`` and ``bgbias audit`` on the tiny bench: tiny factories side by side, a failing model
recorded while the others finish, a resumed audit that embeds nothing it finished, the page's bytes, a
hostile label shown as text, and the ranking."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from click.testing import CliRunner

import bgbias
from bgbias.cli import main
from bgbias.model_audit.outcome import AuditScores, ModelOutcome
from bgbias.model_audit.page import ranked
from tests.audit.models import EMBEDDED, tiny
from tests.saliency.fakes import made_masks

HOSTILE = "<script>alert(1)</script> **bold** | cell"


def _data(bench):
    return {"root": bench / "bench", "masks": bench / "masks", "backgrounds": bench / "backgrounds"}


def _audit(bench, out, models, **extra):
    return bgbias.audit("bench", models, **{**_data(bench), **extra}, repeats=2, out=out, device="cpu",
                        amp="off", workers=0)


@pytest.mark.slow
def test_models_are_ranked_a_failure_recorded_and_a_second_run_reuses_the_finished(tiny_bench, tmp_path):
    out = tmp_path / "audit"
    models = {"seed one": "tests.audit.models:tiny seed=1", HOSTILE: "tests.audit.models:tiny seed=2",
              "in memory": tiny(seed=6), "missing": str(tmp_path / "missing.pt")}
    first = _audit(tiny_bench, out, models)
    assert [outcome.label for outcome in first.failed] == ["missing"]
    assert "missing.pt" in first.failed[0].error
    record = json.loads((out / "audit.json").read_text())
    done = [model for model in record["models"] if model["status"] == "done"]
    assert [model["rank"] for model in record["models"]] == [1, 2, 3, None]
    corrupted = [model["scores"]["corrupted_map_at_r"] for model in done]
    assert corrupted == sorted(corrupted, reverse=True)
    for model in done:
        folder = out / model["folder"]
        assert folder.parent == out / "models" and (folder / "audit-model.json").is_file()
        assert (out / model["report"] / "report.json").is_file()
        assert (out / model["leakage_record"]).is_file()
        scores = model["scores"]
        assert scores["corrupted_repeats"] == 2
        assert {"only-fg", "mixed-same", "bg-gap"} <= set(scores["profile"])
        assert len(scores["leakage_interval"]) == 2 and scores["chance_map_at_r"] is not None
    # #1 − #2 and #2 − #3, from the evaluation folders, on the same corrupted sets; the API's result has them.
    adjacent = record["adjacent_ranks"]
    assert [(pair["rank"], pair["above"], pair["below"]) for pair in adjacent] == [
        (rank, done[rank - 1]["label"], done[rank]["label"]) for rank in (1, 2)]
    assert first.page.comparisons[0].comparison.draws.startswith("paired by draw")
    estimate = adjacent[0]["comparison"]["metrics"]["map_at_r"]["corrupted"]["difference"]["estimate"]
    assert estimate == pytest.approx(corrupted[0] - corrupted[1])
    page = {name: (out / f"audit.{name}").read_bytes() for name in ("md", "html", "json")}

    embedded = dict(EMBEDDED)
    again = _audit(tiny_bench, out, models)
    assert dict(EMBEDDED) == embedded  # the finished models came from their records: nothing embedded
    assert [outcome.label for outcome in again.failed] == ["missing"]
    assert {name: (out / f"audit.{name}").read_bytes() for name in page} == page

    assert page["md"].startswith(b"# Audit of 4 models on bench (test)\n")
    html = page["html"].decode()
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt; **bold** | cell" in html
    markdown = page["md"].decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt; \\*\\*bold\\*\\* \\| cell" in markdown
    assert "<script>" not in markdown
    seed_one = next(model for model in record["models"] if model["label"] == "seed one")
    assert f"[evaluation report]({seed_one['report']}/report.md)" in markdown
    assert f"[folder]({seed_one['folder']})" in markdown and "/leakage/leakage.md)" in markdown
    assert "## Is each model really ahead of the next?" in markdown and "| #2 − #3 |" in markdown


@pytest.mark.slow
def test_other_settings_measure_a_kept_model_again(tiny_bench, tmp_path):
    out = tmp_path / "audit"
    _audit(tiny_bench, out, ["tests.audit.models:tiny seed=3"])
    page = (out / "audit.md").read_text(encoding="utf-8")
    assert page.startswith("# Audit of 1 model on bench (test)\n") and "\n1 model on the test split" in page
    before = EMBEDDED[3]
    _audit(tiny_bench, out, ["tests.audit.models:tiny seed=3"], fill="black")
    assert EMBEDDED[3] > before


def _scores(corrupted):
    return AuditScores(
        clean_map_at_r=0.5, clean_precision_at_1=0.5, corrupted_map_at_r=corrupted,
        corrupted_map_at_r_std=None, corrupted_repeats=2, relative_drop=0.1, profile={}, leakage=0.2,
        leakage_interval=[0.1, 0.3], background_map_at_r=0.1, foreground_map_at_r=0.3,
        chance_map_at_r=0.05, images=10, empty_masks=None)


def test_ranking_is_by_corrupted_map_then_label_with_failures_last():
    def outcome(label, corrupted=None, status="done"):
        scores = None if status == "failed" else _scores(corrupted)
        return ModelOutcome(label=label, spec=label, args={}, folder=f"models/{label}", status=status,
                            scores=scores, error="boom" if status == "failed" else None)

    order = ranked([outcome("a", status="failed"), outcome("c", 0.2), outcome("b", 0.4), outcome("a2", 0.2),
                    outcome("d", 0.9)])
    assert [item.label for item in order] == ["d", "b", "a2", "c", "a"]


@pytest.mark.slow
def test_the_command_scores_a_list_and_exits_3_when_a_model_failed(tiny_bench, tiny_run, tmp_path):
    run = shutil.copytree(tiny_run, tmp_path / "runs" / "run")
    listed = tmp_path / "models.txt"
    listed.write_text("# a tiny encoder, a bgbias run and a factory that cannot build its model\n"
                      "first = tests.audit.models:tiny seed=4\n"
                      f"'our run' = {run}\n"
                      "broken = tests.audit.models:broken\n")
    out = tmp_path / "audit"
    command = ["audit", "--dataset", "bench", "--root", str(tiny_bench / "bench"), "--masks",
               str(tiny_bench / "masks"), "--backgrounds", str(tiny_bench / "backgrounds"), "--repeats", "2",
               "--device", "cpu", "--amp", "off", "--workers", "0", "--no-progress", "--out", str(out),
               "--model", "second = tests.audit.models:tiny seed=5", "--models", str(listed), "--trust-model"]
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 3, result.output
    rows = [line for line in result.output.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| rank | model | clean MAP@R | clean P@1 | corrupted MAP@R")
    assert [row.split(" | ")[1] for row in rows[1:]][-1] == "broken"
    assert "RuntimeError: this factory cannot build its model" in rows[-1]
    assert "1 of 4 models failed: broken" in result.output
    # What the audit will cost, before and while it works (on stderr, beside the log).
    assert "4 models × 12 test images (each: clean, 2 corrupted repeats, the profile's" in result.stderr
    assert re.search(r"\[1/4\] second: \d+m\d\ds; about \d+m\d\ds left for 3 more models", result.stderr)
    assert (out / "audit.html").is_file() and (out / "audit.md").is_file()
    ours = next(model for model in json.loads((out / "audit.json").read_text())["models"]
                if model["label"] == "our run")
    assert ours["status"] == "done" and ours["report"].startswith(str(run / "eval"))  # the run's own folder
    assert (out / ours["leakage_record"]).is_file()


def test_missing_masks_or_backgrounds_stop_the_audit_before_any_model_with_evals_fix(tiny_bench, tmp_path):
    empty = tmp_path / "no-masks"
    empty.mkdir()
    result = CliRunner().invoke(main, ["audit", "--dataset", "bench", "--root", str(tiny_bench / "bench"),
                                       "--masks", str(empty), "--model", "tests.audit.models:tiny",
                                       "--out", str(tmp_path / "audit"), "--device", "cpu"])
    assert result.exit_code == 2, result.output
    assert "saliency masks are missing" in result.output and "bgbias masks --dataset bench" in result.output
    assert not (tmp_path / "audit" / "models").exists()
    nowhere = CliRunner().invoke(main, ["audit", "--dataset", "bench", "--root", str(tiny_bench / "bench"),
                                        "--masks", str(tiny_bench / "masks"), "--backgrounds", str(empty),
                                        "--model", "tests.audit.models:tiny",
                                        "--out", str(tmp_path / "audit")])
    assert nowhere.exit_code == 2 and "background pool folder holds no images" in nowhere.output
    assert not (tmp_path / "audit" / "models").exists()


def test_a_folder_holding_something_else_is_refused(tiny_bench, tmp_path):
    out = tmp_path / "elsewhere"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(bgbias.errors.OptionError, match="neither new, nor empty, nor an earlier audit's"):
        _audit(tiny_bench, out, ["tests.audit.models:tiny"])


@pytest.mark.slow
def test_the_page_and_record_say_what_made_the_masks_and_a_manifests_markup_stays_text(tiny_bench, tmp_path):
    masks = made_masks(tiny_bench / "masks", tmp_path / "masks", model=HOSTILE)
    out = tmp_path / "audit"
    _audit(tiny_bench, out, ["tests.audit.models:tiny seed=4"], masks=masks)
    settings = json.loads((out / "audit.json").read_text())["settings"]
    assert settings["masks"] == str(masks)
    assert settings["mask_maker"] == {"model": HOSTILE, "backend": "torch", "precision": "fp32",
                                      "provider": "CPUExecutionProvider"}
    html = (out / "audit.html").read_text()
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; **bold** | cell, torch fp32 on CPUExecutionProvider" in html
    markdown = (out / "audit.md").read_text()
    assert "<script>" not in markdown and "torch fp32 on CPUExecutionProvider)." in markdown
    model = json.loads((out / "audit.json").read_text())["models"][0]
    leakage = json.loads((out / model["leakage_record"]).read_text())
    assert (leakage["masks"], leakage["mask_maker"]) == (settings["masks"], settings["mask_maker"])
    page = (out / model["leakage_record"]).with_suffix(".md").read_text()
    assert "<script>" not in page and f"masks: {masks} (&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_the_page_says_how_many_images_have_empty_masks_and_the_scores_carry_the_count(tmp_path):
    from types import SimpleNamespace

    from bgbias.measurement.record import evaluation_record
    from bgbias.measurement.summary import summarize_evaluation
    from bgbias.model_audit.page import AuditPage, write_audit_page
    from bgbias.model_audit.run import scores_of
    from tests.report.synthetic import make_run

    clean, corrupted, labels, ids = make_run(2)
    meta = {"method": "m", "dataset": "d", "split": "test"}
    report = evaluation_record(summarize_evaluation(clean, corrupted, labels, ids, meta, empty_masks=ids[:3]))
    views = SimpleNamespace(map_at_r=0.5)
    leakage = SimpleNamespace(leakage=0.2, interval=(0.1, 0.3), background=views, foreground=views,
                              chance=views)
    scores = scores_of(report, leakage)
    assert (scores.images, scores.empty_masks) == (len(ids), 3)
    outcome = ModelOutcome(label="m", spec="m", args={}, folder="models/m", status="done", scores=scores)
    settings = {"repeats": 2, "seed": 0, "fill": "inpainted", "masks": "masks/d", "mask_maker": None}
    page = write_audit_page(AuditPage("d", "test", settings, (outcome,)), tmp_path)["audit_md"].read_text()
    assert f"**3 of {len(ids)} images of the split have a saliency mask that shows no object**" in page
    none = scores.model_copy(update={"empty_masks": 0})
    clear = ModelOutcome(label="m", spec="m", args={}, folder="models/m", status="done", scores=none)
    page = write_audit_page(AuditPage("d", "test", settings, (clear,)), tmp_path)["audit_md"].read_text()
    assert "shows no object" not in page


def test_the_table_splits_the_drop_by_the_paste_control_and_an_older_audit_shows_no_split(tmp_path):
    from types import SimpleNamespace

    from bgbias.model_audit.page import AuditPage, write_audit_page
    from bgbias.model_audit.run import scores_of
    from tests.report.synthetic import decomposed, make_run, profiled_report

    clean, corrupted, labels, ids = make_run(2)
    repasted = make_run(1, seed=7)[1]
    report = profiled_report(clean, corrupted, repasted, labels, ids)
    views = SimpleNamespace(map_at_r=0.5)
    leakage = SimpleNamespace(leakage=0.2, interval=(0.1, 0.3), background=views, foreground=views,
                              chance=views)
    scores = scores_of(report, leakage)
    parts = decomposed(clean, corrupted, repasted)["map_at_r"]
    assert scores.paste_cost == parts.paste_cost.difference.estimate
    assert scores.background_effect == parts.background_effect.difference.estimate
    settings = {"repeats": 2, "seed": 0, "fill": "inpainted", "masks": "masks/d", "mask_maker": None}
    outcome = ModelOutcome(label="m", spec="m", args={}, folder="models/m", status="done", scores=scores)
    page = write_audit_page(AuditPage("d", "test", settings, (outcome,)), tmp_path)["audit_md"].read_text()
    header = next(line for line in page.splitlines() if line.startswith("| rank |"))
    assert "| relative drop (%) | paste cost | background effect | repasted | only-fg |" in header
    assert f"| {100 * scores.paste_cost:.2f} | {100 * scores.background_effect:.2f} |" in page
    older = scores.model_copy(update={"paste_cost": None, "background_effect": None})
    outcome = outcome.model_copy(update={"scores": older})
    page = write_audit_page(AuditPage("d", "test", settings, (outcome,)), tmp_path)["audit_md"].read_text()
    assert "| paste cost |" not in page


def test_each_model_is_compared_with_the_one_ranked_above_it_on_the_page_and_in_the_record(tmp_path):
    from bgbias.model_audit.adjacent import adjacent_comparisons
    from bgbias.model_audit.page import AuditPage, ranks, write_audit_page
    from tests.report.synthetic import write_evaluation

    def outcome(label, pull, seed):
        write_evaluation(tmp_path / "models" / label / "eval", pull=pull, seed=seed)
        return ModelOutcome(label=label, spec=label, args={}, folder=f"models/{label}", status="done",
                            report=f"models/{label}/eval", scores=_scores(0.1 + pull / 10))

    order = ranked([outcome("good", 5.0, 0), outcome("twin", 5.0, 0), outcome("chance", 0.0, 1)])
    found = adjacent_comparisons([(rank, one) for rank, one in ranks(order) if rank is not None], tmp_path)
    assert [(pair.rank, pair.above, pair.below) for pair in found] == [(1, "good", "twin"),
                                                                       (2, "twin", "chance")]
    same, ahead = (pair.comparison.metrics["map_at_r"].corrupted for pair in found)
    assert same.difference.estimate == 0.0 and same.p_value == 1.0  # the same scores: not told apart
    assert ahead.difference.low > 0 and ahead.p_value < 0.01
    settings = {"repeats": 2, "seed": 0, "fill": "inpainted", "masks": "masks/d", "mask_maker": None}
    files = write_audit_page(AuditPage("d", "test", settings, order, found), tmp_path)
    markdown = files["audit_md"].read_text()
    assert "## Is each model really ahead of the next?" in markdown
    assert "| #1 − #2 | good | twin | +0.00 \\[+0.00, +0.00\\] | 1.000 |" in markdown
    record = json.loads(files["audit_json"].read_text())
    assert record["adjacent_ranks"][1]["comparison"]["metrics"]["map_at_r"]["corrupted"]["p_value"] < 0.01
    assert record["adjacent_ranks"][0]["comparison"]["intervals"]["resamples"] == 2000
