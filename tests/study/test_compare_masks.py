"""``bgbias study --compare-masks``: the second mask source in the study's spec (named as ``--masks`` names
one, never the study's own), its masks made in the masks steps or laid out by ``prepare``, every run's
evaluation asked for the mask sensitivity, the dry run pricing the second masks and the repeats cut out with
them, and a folder planned without it extended with ``--extend`` (its runs measured again, not trained) or
else refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bgbias.errors import OptionError
from bgbias.fileio import write_json_atomic
from bgbias.study import cost, dry_run, runs, steps
from bgbias.study.cost import SplitSizes, estimate_masks, estimate_runs, planned_work
from bgbias.study.ledger import RunArgs, read_plan, update_plan
from bgbias.study.pipeline import merged_plan, plan_study, planned_shards
from bgbias.study.plan import StudyRun, study_plan
from bgbias.study.runs import REPEATS
from bgbias.study.spec import StudySpec, bench_spec, study_spec, with_compare_masks
from bgbias.study.steps import page_step_id
from tests.conftest import tiny_config
from tests.replicas import make_cub
from tests.report.synthetic import write_run_record
from tests.study.test_cost import FAKE, SMALL


def _bench(tmp_path: Path, masks: str = "ground-truth", compare: str | None = "u2netp") -> StudySpec:
    return with_compare_masks(bench_spec("small", 0.9, 0, masks, backgrounds=tmp_path / "pools"), compare)


def test_the_second_source_is_named_as_masks_names_one_and_the_spec_reads_back(tmp_path):
    spec = study_spec("bench", None, None, tmp_path / "pools", compare_masks="u2netp")
    assert (spec.masks, spec.compare_masks) == ("ground-truth", "u2netp")
    assert Path(spec.compare_masks_dir).parent == Path(spec.masks_dir).parent  # beside the exact masks
    assert Path(spec.compare_masks_dir) != Path(spec.masks_dir)
    assert StudySpec.model_validate_json(spec.model_dump_json()) == spec
    plan_study(tmp_path / "study", spec, study_plan("quick"))
    assert read_plan(tmp_path / "study").spec == spec
    # A spec written before the field existed reads as one without a second source.
    older = json.loads(bench_spec("small", 0.9, 0, "ground-truth").model_dump_json())
    del older["compare_masks"], older["compare_masks_dir"]
    assert StudySpec.model_validate(older).compare_masks is None

    root = make_cub(tmp_path / "cub", n_classes=4, per_class=1)
    (tmp_path / "mine").mkdir()
    on_cub = study_spec("cub", root, "u2netp", None, compare_masks=str(tmp_path / "mine"))
    assert (on_cub.compare_masks, on_cub.compare_masks_dir) == ("folder", str(tmp_path / "mine"))
    own = study_spec("cub", root, str(tmp_path / "mine"), None, compare_masks="u2net")
    assert (own.masks, own.compare_masks) == ("folder", "u2net")


def test_the_study_s_own_masks_or_a_missing_source_are_refused_as_a_second_one(tmp_path):
    with pytest.raises(OptionError, match="names the study's own masks") as same:
        study_spec("bench", None, None, tmp_path / "pools", compare_masks="ground-truth")
    assert "--compare-masks another source" in same.value.fix
    root = make_cub(tmp_path / "cub", n_classes=4, per_class=1)
    (tmp_path / "mine").mkdir()
    for masks, compare in (("u2netp", "u2netp"), (str(tmp_path / "mine"), str(tmp_path / "mine") + "/")):
        with pytest.raises(OptionError, match="names the study's own masks"):
            study_spec("cub", root, masks, None, compare_masks=compare)
    with pytest.raises(OptionError, match="--compare-masks is neither a U²-Net model"):
        study_spec("cub", root, None, None, compare_masks=str(tmp_path / "nowhere"))
    with pytest.raises(OptionError, match="exact masks exist for the bench only") as exact:
        study_spec("cub", root, None, None, compare_masks="ground-truth")
    assert "--compare-masks u2net or u2netp" in exact.value.fix


def test_a_second_u2net_source_gets_masks_steps_which_make_both_models(tmp_path, monkeypatch):
    spec = _bench(tmp_path)  # exact masks of its own: only the second source is made
    goals = plan_study(tmp_path / "study", spec, study_plan("quick"))
    plan = read_plan(tmp_path / "study")
    assert [step_id for step_id in plan.steps if plan.steps[step_id].kind == "masks"] == ["masks-1of1"]
    assert all("masks-1of1" in plan.steps[step_id].needs for step_id in plan.steps[goals[0]].needs)
    # A second source found, not made, needs no masks steps.
    found = _bench(tmp_path, compare=str(tmp_path))
    plan_study(tmp_path / "found", found, study_plan("quick"))
    assert not any(step.kind == "masks" for step in read_plan(tmp_path / "found").steps.values())

    made = []
    monkeypatch.setattr(steps, "open_dataset", lambda *args: type("D", (), {"items": lambda self: []})())
    monkeypatch.setattr(steps, "make_masks", lambda items, out, *, model, **kw: made.append((model, str(out)))
                        or type("M", (), {"failed": 0})())
    both = _bench(tmp_path, masks="u2net", compare="u2netp")
    inputs = steps.make_mask_shard(both, (0, 1), "cpu", log=lambda _line: None)
    assert made == [("u2net", both.masks_dir), ("u2netp", both.compare_masks_dir)]
    assert inputs["model"] == "u2net+u2netp"


def test_each_run_s_evaluation_is_asked_for_the_second_masks(tmp_path, monkeypatch):
    spec = _bench(tmp_path, compare=str(tmp_path / "second"))
    asked = []
    monkeypatch.setattr(steps, "train_study_run", lambda folder, run, *args, **kw: folder / run.folder_name)
    monkeypatch.setattr(steps, "measure_run", lambda *args: asked.append(args[-1]))
    run = RunArgs(method="multi_similarity", bgaugment=False, seed=0, compare_masks=True)
    steps.run_and_measure(tmp_path, spec, run, "cpu", 1, log=lambda _line: None)
    assert asked == [tmp_path / "second"]
    steps.run_and_measure(tmp_path, _bench(tmp_path, compare=None), run, "cpu", 1, log=lambda _line: None)
    assert asked[-1] is None
    # A run whose step was not given the second masks (another page's, in a folder that gained them) is
    # measured as its step says.
    alone = run.model_copy(update={"compare_masks": False})
    steps.run_and_measure(tmp_path, spec, alone, "cpu", 1, log=lambda _line: None)
    assert asked[-1] is None


def test_a_folder_planned_without_a_second_source_refuses_one_without_extend_naming_it(tmp_path):
    plan_study(tmp_path, _bench(tmp_path, compare=None), study_plan("quick"))
    before = (tmp_path / "plan.json").read_bytes()
    with pytest.raises(OptionError, match="second mask source none there, u2netp in this") as refused:
        plan_study(tmp_path, _bench(tmp_path, compare="u2netp"), study_plan("quick"))
    fix = refused.value.fix
    assert "pass --extend" in fix and "without --compare-masks" in fix and "--out DIR" in fix
    assert (tmp_path / "plan.json").read_bytes() == before
    # With another difference it is another study, --extend or not, and --extend is not offered.
    other_pools = _bench(tmp_path, compare="u2netp").model_copy(update={"backgrounds": str(tmp_path / "x")})
    for extend in (False, True):
        with pytest.raises(OptionError, match="background pools") as refused:
            plan_study(tmp_path, other_pools, study_plan("quick"), extend=extend)
        assert "--extend" not in refused.value.fix
    assert (tmp_path / "plan.json").read_bytes() == before


def test_a_second_source_once_recorded_is_neither_changed_nor_dropped(tmp_path):
    plan_study(tmp_path, _bench(tmp_path, compare=None), study_plan("quick"))
    plan_study(tmp_path, _bench(tmp_path, compare="u2netp"), study_plan("quick"), extend=True)  # gained
    before = (tmp_path / "plan.json").read_bytes()
    for extend in (False, True):
        with pytest.raises(OptionError, match="second mask source u2netp there, u2net in this") as changed:
            plan_study(tmp_path, _bench(tmp_path, compare="u2net"), study_plan("quick"), extend=extend)
        assert "--compare-masks u2netp" in changed.value.fix and "--extend" not in changed.value.fix
        with pytest.raises(OptionError, match="second mask source u2netp there, none in this") as dropped:
            plan_study(tmp_path, _bench(tmp_path, compare=None), study_plan("quick"), extend=extend)
        assert "--compare-masks u2netp" in dropped.value.fix
    assert (tmp_path / "plan.json").read_bytes() == before


def _finished(folder: Path) -> None:
    """Every step of the folder's plan done, as a study that ran to its end leaves it."""
    def finish(plan):
        done = {step_id: step.model_copy(update={"state": "done", "attempts": 1,
                                                  "inputs": {"model": "u2netp"} if step.kind == "masks"
                                                  else {}})
                for step_id, step in plan.steps.items()}
        return plan.model_copy(update={"steps": done})
    update_plan(folder, finish)


def test_extend_adds_the_second_source_and_measures_every_run_again_without_training_it(tmp_path):
    folder = tmp_path / "study"
    plan_study(folder, _bench(tmp_path, compare=None), study_plan("quick", seeds=2))
    _finished(folder)
    spec = _bench(tmp_path, compare="u2netp")
    goals = plan_study(folder, spec, study_plan("quick", seeds=2), extend=True)
    plan = read_plan(folder)
    assert plan.spec == spec
    runs = [step_id for step_id, step in plan.steps.items() if step.kind == "run"]
    # The second source's masks steps, taken after prepare as in a new plan, and needed by every run.
    assert list(plan.steps)[:2] == ["prepare", "masks-1of1"] and len(runs) == 4
    assert plan.steps["prepare"].state == plan.steps["masks-1of1"].state == "pending"
    for step_id in runs:
        step = plan.steps[step_id]
        assert step.run.compare_masks and step.state == "pending" and step.attempts == 0
        assert step.needs == ["prepare", "masks-1of1"]
    assert plan.steps[goals[0]].state == "pending"  # the page is written again
    # The same command again changes nothing, and a page of a subset needs no more --extend.
    again = (folder / "plan.json").read_bytes()
    plan_study(folder, spec, study_plan("quick", seeds=2), extend=True)
    assert (folder / "plan.json").read_bytes() == again
    plan_study(folder, spec, study_plan("quick"))


def test_the_study_s_own_u2net_masks_steps_are_done_again_for_the_second_model(tmp_path):
    folder = tmp_path / "study"
    plan_study(folder, _bench(tmp_path, masks="u2netp", compare=None), study_plan("quick", masks="u2netp"))
    _finished(folder)
    plan_study(folder, _bench(tmp_path, masks="u2netp", compare="u2net"), study_plan("quick", masks="u2netp"),
               extend=True)
    plan = read_plan(folder)
    assert [step_id for step_id, step in plan.steps.items() if step.kind == "masks"] == ["masks-1of1"]
    masks = plan.steps["masks-1of1"]
    assert masks.state == "pending" and masks.inputs == {"model": "u2netp"}  # its u2netp masks are kept
    # A second source found, not made, keeps the masks step done; prepare is done again (it lays the bench's
    # exact masks out).
    found = tmp_path / "found"
    plan_study(found, _bench(tmp_path, masks="u2netp", compare=None), study_plan("quick", masks="u2netp"))
    _finished(found)
    plan_study(found, _bench(tmp_path, masks="u2netp", compare="ground-truth"),
               study_plan("quick", masks="u2netp"), extend=True)
    plan = read_plan(found)
    assert {step_id: step.state for step_id, step in plan.steps.items()} == {
        "prepare": "pending", "masks-1of1": "done", "run/multi_similarity-seed0": "pending",
        "run/multi_similarity-bgaugment-seed0": "pending", "page/report-multi_similarity-1seed": "pending"}


def test_the_cost_counts_the_repeats_cut_out_with_the_second_masks_and_their_pass(tmp_path, monkeypatch):
    config = tiny_config(Path("/nowhere"))
    sizes = SplitSizes(train_classes=(4, 4, 4, 4), val=10, test=300)
    alone = planned_work(config, sizes, profile=False)
    compared = planned_work(config, sizes, profile=False, compare_masks=True)
    assert compared.evaluation_corrupted - alone.evaluation_corrupted == REPEATS * 300
    assert compared.evaluation_clean == alone.evaluation_clean

    monkeypatch.setattr(cost, "split_sizes", lambda spec: sizes)
    monkeypatch.setattr(cost, "sample_images", lambda spec: [])
    runs = [StudyRun("multi_similarity", False, 0, settings=SMALL)]
    priced = {compare: estimate_runs(_bench(tmp_path, compare=compare), runs, profile=False, device="cpu",
                                     timer=lambda *args, **kw: FAKE)[runs[0].folder_name]
              for compare in (None, "u2netp")}
    assert priced["u2netp"].measure - priced[None].measure == pytest.approx(
        REPEATS * 300 * FAKE.corrupted_image)
    assert priced["u2netp"].train == priced[None].train

    timed = []
    monkeypatch.setattr(cost, "estimate_model_masks",
                        lambda spec, model, images, device: timed.append(model) or images * 0.5)
    assert estimate_masks(_bench(tmp_path, masks="u2net", compare="u2netp"), 10, device="cpu") == 10.0
    assert timed == ["u2net", "u2netp"]
    assert estimate_masks(_bench(tmp_path, compare=None), 10, device="cpu") == 0.0


def test_a_run_trained_before_the_extension_is_kept_and_only_measured_again(tmp_path, monkeypatch):
    folder = tmp_path / "study"
    plan_study(folder, _bench(tmp_path, compare=None), study_plan("quick"))
    _finished(folder)
    spec = _bench(tmp_path, compare="u2netp")
    plan_study(folder, spec, study_plan("quick"), extend=True)
    plan = read_plan(folder)
    step = plan.steps["run/multi_similarity-seed0"]
    run_dir = folder / step.run.study_run().folder_name
    run_dir.mkdir()
    write_json_atomic(run_dir / "config.json", runs.run_config(spec, step.run.study_run()).as_dict())
    write_run_record(run_dir)

    def trained_again(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(runs, "train", trained_again)
    monkeypatch.setattr(runs, "resume_training", trained_again)
    measured, lines = [], []
    monkeypatch.setattr(steps, "measure_run", lambda *args: measured.append((args[0], args[-1])))
    steps.execute_step(folder, plan, "run/multi_similarity-seed0", "cpu", 1, lines.append)
    assert measured == [(run_dir, Path(spec.compare_masks_dir))]
    assert any("trained already" in line for line in lines)
    assert any("the second masks" in line for line in lines)


def test_the_dry_run_of_the_extension_prices_the_second_model_s_masks_and_the_evaluations_alone(tmp_path,
                                                                                             monkeypatch):
    sizes = SplitSizes(train_classes=(4, 4, 4, 4), val=10, test=300)
    for module in (cost, dry_run):
        monkeypatch.setattr(module, "split_sizes", lambda spec: sizes)
    monkeypatch.setattr(cost, "sample_images", lambda spec: [])
    timed = []
    monkeypatch.setattr(cost, "estimate_model_masks",
                        lambda spec, model, images, device: timed.append((model, images)) or images * 0.5)
    folder, plan = tmp_path / "study", study_plan("quick", masks="u2netp", settings=SMALL)
    plan_study(folder, _bench(tmp_path, masks="u2netp", compare=None), plan)
    _finished(folder)
    for step in read_plan(folder).steps.values():
        if step.run is not None:
            (folder / step.run.study_run().folder_name).mkdir()
            write_run_record(folder / step.run.study_run().folder_name)

    def priced(spec):
        current = read_plan(folder)
        merged = merged_plan(current, folder, spec, plan, planned_shards(current, spec), extend=True)
        return dry_run.plan_cost(folder, merged, [page_step_id(plan)], device="cpu",
                                 timer=lambda *args, **kw: FAKE)

    extension = priced(_bench(tmp_path, masks="u2netp", compare="u2net"))
    assert timed == [("u2net", sizes.images)]  # the study's own u2netp masks are made already
    assert extension.masks == sizes.images * 0.5
    assert extension.runs == plan.runs()
    assert all(run_cost.train == 0 for run_cost in extension.costs.values())  # trained already
    # Measured with the second masks: 5 corrupted repeats more than the same runs measured without them.
    names = [run.folder_name for run in plan.runs()]
    alone = estimate_runs(_bench(tmp_path, masks="u2netp", compare=None), plan.runs(), profile=False,
                          device="cpu", trained=names, timer=lambda *args, **kw: FAKE)
    for name in names:
        assert extension.costs[name].measure - alone[name].measure == pytest.approx(
            REPEATS * sizes.test * FAKE.corrupted_image)
