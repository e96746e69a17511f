"""A whole study (:mod:`bgbias.study`): its plan recorded in the study folder, then the work done where the
executor puts it, then what it measured."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bgbias.errors import OptionError
from bgbias.study.ledger import FINISHED, Plan, RunArgs, Step, read_plan, update_plan, with_step
from bgbias.study.local import Slot, local_slots, run_local
from bgbias.study.plan import StudyPlan
from bgbias.study.slurm import SlurmOptions, checked_options, script_value, submit_study
from bgbias.study.spec import MASK_MODELS, StudySpec
from bgbias.study.steps import mask_shards, page_step_id, planned_steps
from bgbias.study.worker import DEFAULT_TIMING, Timing, needed_steps

PAGE_FILES = ("table_md", "seeds_md", "study_md", "study_html")


@dataclass(frozen=True)
class StudyResult:
    folder: Path
    runs: list[Path]  # the runs measured, in the plan's order
    report: dict[str, Path]  # the page's files by name; empty when none was written
    failures: dict[str, str] = dataclasses.field(default_factory=dict)  # failed run folder name → error
    page_error: str | None = None  # why the page was not written, when its step failed


def plan_study(folder: Path, spec: StudySpec, plan: StudyPlan, *, extend: bool = False) -> list[str]:
    """Record ``plan`` in the study folder's plan (:func:`merged_plan`) and return its goals (the page
    step)."""
    shards = planned_shards(read_plan(folder), spec)
    update_plan(folder, lambda current: merged_plan(current, folder, spec, plan, shards, extend=extend))
    return [page_step_id(plan)]


def merged_plan(current: Plan | None, folder: Path, spec: StudySpec, plan: StudyPlan, shards: int, *,
                extend: bool) -> Plan:
    """The folder's plan ``current`` with ``plan``'s steps (``shards`` masks steps when it is new).

    A folder holds one study: another dataset, root, masks, second masks or pools is refused, but a second
    mask source that a folder planned without one gains with ``extend`` (:func:`with_second_masks`). Steps
    the record lacks (other methods, more seeds, a profile, the second masks' evaluations) are added only with
    ``extend``, so that a typo cannot start hours of runs beside the planned ones. Steps of ``plan`` that
    failed before are tried again.
    """
    planned = planned_steps(spec, plan, shards)
    if current is None:
        return Plan(spec=spec, steps=planned)
    _refuse_other_spec(folder, current.spec, spec, extend=extend)
    _refuse_other_measurements(folder, current, planned)
    if gains_second_masks(current.spec, spec):
        current = with_second_masks(current, spec)
    steps = dict(current.steps)
    # A page of runs the plan has already (a subset of the study) is no extension.
    added = [step_id for step_id, step in planned.items() if step_id not in steps
             and not (step.kind == "page" and all(need in steps for need in step.needs))]
    pages = [step_id for step_id in planned if step_id not in steps and step_id not in added]
    profiled = [step_id for step_id, step in planned.items() if step_id in steps and step.run is not None
                and step.run.profile and not _run_args(steps[step_id]).profile]
    compared = [step_id for step_id, step in planned.items() if step_id in steps and step.run is not None
                and step.run.compare_masks and not _run_args(steps[step_id]).compare_masks]
    if (added or profiled or compared) and not extend:
        named = [*added, *(f"the profile of {step_id}" for step_id in profiled),
                 *(f"the second masks of {step_id}" for step_id in compared)]
        raise OptionError(
            f"the study folder's plan lacks {len(named)} step(s) this command asks for (e.g. {named[0]})",
            path=folder, fix="pass --extend to add them to the plan, or run the other study in a folder of "
                             "its own (--out DIR)")
    for step_id in [*added, *pages]:
        steps[step_id] = planned[step_id]
    # Masks steps added with a second source are taken after prepare, as in a new plan.
    steps = dict(sorted(steps.items(), key=lambda item: STEP_ORDER.get(item[1].kind, len(STEP_ORDER))))
    for step_id in profiled:
        step = steps[step_id]
        steps[step_id] = step.model_copy(update={
            "run": _run_args(step).model_copy(update={"profile": True}),
            "state": "pending" if step.state in FINISHED else step.state})
    for step_id in compared:  # its training is kept: only its evaluation is made again, with the second masks
        step = steps[step_id]
        again = {"state": "pending", "attempts": 0} if step.state in FINISHED else {}
        run = _run_args(step).model_copy(update={"compare_masks": True})
        steps[step_id] = step.model_copy(update={"run": run, "needs": planned[step_id].needs, **again})
    merged = current.model_copy(update={"steps": steps})
    goal = page_step_id(plan)
    for step_id in needed_steps(merged, [goal]):
        if merged.steps[step_id].state == "failed":
            merged = with_step(merged, step_id, state="pending", attempts=0, error=None, traceback=None)
    # A page written while some of its runs had failed is written again once they are tried again.
    if merged.steps[goal].state == "done" and any(merged.steps[need].state != "done"
                                                  for need in merged.steps[goal].needs):
        merged = with_step(merged, goal, state="pending", attempts=0)
    return merged


STEP_ORDER = {"prepare": 0, "masks": 1}
"""Where a plan takes each kind of step; runs and pages come after, in the order they were added."""


SPEC_FIELDS = {"dataset": "the dataset", "root": "the dataset's folder", "bench": "the bench's settings",
               "masks": "the mask source", "masks_dir": "the masks folder",
               "backgrounds": "the background pools", "compare_masks": "the second mask source",
               "compare_masks_dir": "the second masks folder"}
"""Each field of a :class:`StudySpec`, as a refusal names it."""


def _refuse_other_spec(folder: Path, recorded: StudySpec, spec: StudySpec, *, extend: bool) -> None:
    """An ``OptionError`` naming each field of the study that differs from the folder's (e.g. other pools
    with ``--extend``), and the options that repeat the folder's: a folder holds one study. A second mask
    source the folder lacks is no other study with ``extend``; without it, the fix names ``--extend``."""
    differ = [name for name in SPEC_FIELDS if getattr(recorded, name) != getattr(spec, name)]
    gained = gains_second_masks(recorded, spec)
    if gained and extend:
        differ = [name for name in differ if name not in ("compare_masks", "compare_masks_dir")]
    if "bench" in differ or "dataset" in differ:  # the bench's folder and masks follow from its settings
        differ = [name for name in differ if name not in ("root", "masks_dir", "compare_masks_dir")]
    if "masks" in differ:  # a model's masks folder follows from the model
        differ = [name for name in differ if name != "masks_dir"]
    if "compare_masks" in differ:  # likewise the second source's
        differ = [name for name in differ if name != "compare_masks_dir"]
    if not differ:
        return
    said = "; ".join(f"{SPEC_FIELDS[name]} {_spec_value(recorded, name)} there, {_spec_value(spec, name)} "
                     f"in this command" for name in differ)
    repeat = " ".join(_spec_options(recorded, name) for name in differ)
    fix = f"run this study in a folder of its own (--out DIR), or repeat that study's options ({repeat})"
    if gained:  # nothing else differs
        fix = (f"pass --extend to add the second mask source to this study (its masks are made and every "
               f"run's evaluation is made again with them; no run is trained again), {fix}")
    raise OptionError(f"the study folder holds a study of {recorded.title}: {said}", path=folder, fix=fix)


def gains_second_masks(recorded: StudySpec, spec: StudySpec) -> bool:
    """Whether ``spec`` is the folder's study ``recorded`` (planned without a second mask source) with one."""
    return recorded.compare_masks is None and spec.compare_masks is not None and recorded == spec.model_copy(
        update={"compare_masks": None, "compare_masks_dir": None})


def with_second_masks(current: Plan, spec: StudySpec) -> Plan:
    """The folder's plan ``current`` as the study ``spec``, which adds a second mask source to its own: the
    prepare step goes back to pending (it lays the bench's exact masks out), and so do the masks steps when
    the source is a U²-Net model (they make its masks, keeping the study's own). :func:`merged_plan` adds the
    masks steps a plan without any lacks, and gives the runs the second masks."""
    redone = ("prepare", "masks") if spec.compare_masks in MASK_MODELS else ("prepare",)
    steps = {step_id: step.model_copy(update={"state": "pending", "attempts": 0})
             if step.kind in redone and step.state in FINISHED else step
             for step_id, step in current.steps.items()}
    return current.model_copy(update={"spec": spec, "steps": steps})


def _spec_value(spec: StudySpec, name: str) -> str:
    value = getattr(spec, name)
    if name == "bench":
        return "none" if value is None else f"{value.preset}, rho {value.rho:g}, seed {value.seed}"
    return "none" if value is None else str(value)


def _spec_options(spec: StudySpec, name: str) -> str:
    """The options that give ``spec``'s field ``name``."""
    if name == "bench":
        if spec.bench is None:
            return f"--dataset {spec.dataset}"
        return f"--bench-preset {spec.bench.preset} --rho {spec.bench.rho:g} --bench-seed {spec.bench.seed}"
    if name == "masks_dir":
        return f"--masks {spec.masks_dir}"
    if name == "masks":
        return f"--masks {spec.masks_dir if spec.masks == 'folder' else spec.masks}"
    if name in ("compare_masks", "compare_masks_dir"):
        if spec.compare_masks is None:
            return "without --compare-masks"
        second = spec.compare_masks_dir if spec.compare_masks == "folder" else spec.compare_masks
        return f"--compare-masks {second}"
    option = {"dataset": "--dataset", "root": "--root", "backgrounds": "--backgrounds"}[name]
    return f"{option} {getattr(spec, name)}"


def _refuse_other_measurements(folder: Path, current: Plan, planned: dict[str, Step]) -> None:
    """An ``OptionError`` when a run the plan holds would be measured otherwise than this command asks: other
    ``--explain-images``, or watching the test split where the plan's run does not (a run that does more
    than asked, a profile or a watched test split, is kept; a missing profile is added by ``--extend``)."""
    for step_id, step in planned.items():
        if step.run is None or step_id not in current.steps:
            continue
        recorded, asked = _run_args(current.steps[step_id]), step.run
        if recorded.explain_images != asked.explain_images:
            raise OptionError(
                f"the study folder's plan scores the foreground of --explain-images "
                f"{recorded.explain_images} test images per run, not {asked.explain_images}",
                path=folder / "plan.json",
                fix=f"pass --explain-images {recorded.explain_images} (the plan's) to go on with this study, "
                    f"or run one with {asked.explain_images} in a folder of its own (--out DIR)")
        if asked.watch_test and not recorded.watch_test:
            raise OptionError(
                f"the study folder's run {step_id.removeprefix('run/')} does not watch the test split, which "
                f"this command asks for (its preset watches {asked.method}'s runs)",
                path=folder / "plan.json",
                fix="repeat the plan's preset and options to go on with this study, or run this one in a "
                    "folder of its own (--out DIR)")


def _run_args(step: Step) -> RunArgs:
    assert step.run is not None
    return step.run


def planned_shards(recorded: Plan | None, spec: StudySpec) -> int:
    """The masks steps of the folder's plan ``recorded``, or of a new one (:func:`mask_shards`): also those
    of a plan that had none, when ``spec`` adds a second source made with U²-Net."""
    if recorded is None:
        return mask_shards(spec)
    shards = sum(step.kind == "masks" for step in recorded.steps.values())
    return shards or (mask_shards(spec) if gains_second_masks(recorded.spec, spec) else 0)


def run_study(
    folder: Path,
    spec: StudySpec,
    plan: StudyPlan,
    *,
    slots: Sequence[Slot] | None = None,
    extend: bool = False,
    log: Callable[[str], None] = print,
    timing: Timing = DEFAULT_TIMING,
) -> StudyResult:
    """Plan ``plan`` in ``folder`` and do its steps with a local worker per slot (default: one, on the
    device ``auto`` picks); the runs measured, the page, the failed runs. A run that fails is left out of
    the page and named in it; when every run fails there is no page."""
    goals = plan_study(folder, spec, plan, extend=extend)
    log(steps_left(folder, goals))
    run_local(folder, goals, slots if slots is not None else local_slots(), log=log, timing=timing)
    return study_result(folder, goals)


def steps_left(folder: Path, goals: Sequence[str]) -> str:
    """What is left of the plan's ``goals`` before the workers start, and where its cost is said: the dry run
    estimates it (from timing a few steps here), and the time left follows each run."""
    plan = read_plan(folder)
    assert plan is not None
    needed = [plan.steps[step_id] for step_id in needed_steps(plan, goals)]
    left = [step for step in needed if step.state != "done"]
    runs = sum(step.kind == "run" for step in left)
    return (f"{len(left)} of {len(needed)} steps to do, {runs} of them run{'s' * (runs != 1)}: `bgbias study "
            f"--dry-run` (same options) estimates what they cost on this machine; the time left follows each "
            f"run, and `bgbias study --status` shows it too")


def study_result(folder: Path, goals: Sequence[str]) -> StudyResult:
    """What the plan's ``goals`` (page steps) measured: their runs done, their page, their failed runs."""
    plan = read_plan(folder)
    assert plan is not None
    runs, failures, report, page_error = [], {}, {}, None
    for goal in goals:
        page = plan.steps[goal]
        for need in page.needs:
            step = plan.steps[need]
            assert step.run is not None
            name = step.run.study_run().folder_name
            if step.state == "done":
                runs.append(folder / name)
            elif step.state == "failed":
                failures[name] = step.error or "failed"
            else:
                failures[name] = f"not done ({step.state}): another worker may still be running it"
        if page.state == "done" and page.page is not None:
            out = folder / page.page.folder
            report = {name: out / name.replace("_", ".") for name in PAGE_FILES}
        elif page.state == "failed":
            page_error = page.error
    return StudyResult(folder, runs, report, failures, page_error)


def slurm_stages(plan: Plan, goals: Sequence[str]) -> list[list[str]]:
    """The job arrays a SLURM submission of ``goals`` makes: the unfinished prepare, masks and run steps by
    kind (each array waits for the one before), and the page alone when it is all that is left (otherwise
    the last run task to finish writes it)."""
    left = [step_id for step_id in needed_steps(plan, goals) if plan.steps[step_id].state not in FINISHED]
    stages = [[step_id for step_id in left if plan.steps[step_id].kind == kind]
              for kind in ("prepare", "masks", "run")]
    if not any(stages):
        stages.append([step_id for step_id in left if plan.steps[step_id].kind == "page"])
    return [stage for stage in stages if stage]


def submit_study_to_slurm(folder: Path, spec: StudySpec, plan: StudyPlan, options: SlurmOptions, *,
                          extend: bool = False) -> str:
    """Plan ``plan`` in ``folder`` and submit what is not done as SLURM job arrays
    (:func:`~bgbias.study.slurm.submit_study`); what was submitted, as text."""
    # Refused before the plan is written: the folder's path and the options go into the batch script.
    script_value(str(Path(folder).absolute()), "the study folder's path", path=folder)
    checked_options(options)
    goals = plan_study(folder, spec, plan, extend=extend)
    recorded = read_plan(folder)
    assert recorded is not None
    stages = slurm_stages(recorded, goals)
    if not stages:
        return f"nothing to submit: every step of {folder} is done"
    jobs = submit_study(folder, goals, stages, options)
    ids = sorted({job.job_id.split("_")[0] for job in jobs})
    return (f"submitted {sum(map(len, stages))} task(s) in {len(stages)} job array(s) ({', '.join(ids)}); "
            f"follow them with `bgbias study --status` (same options); logs in {folder / 'slurm'}")
