"""``bgbias study --dry-run``: the plan the command would record, what of it is done, what the rest costs on
the target device, and for SLURM the submission it would make. Nothing is recorded or trained."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

from bgbias.engine.device import resolve_device
from bgbias.engine.run_dir import DONE, RunDir, read_record
from bgbias.study.cost import PlanCost, estimate_masks, estimate_page, estimate_prepare, estimate_runs
from bgbias.study.cost_timing import ConfigTiming, time_config
from bgbias.study.ledger import FINISHED, Plan, Step, read_plan, state_counts
from bgbias.study.pipeline import merged_plan, planned_shards, slurm_stages
from bgbias.study.plan import StudyPlan
from bgbias.study.sizes import known_size_note, split_sizes
from bgbias.study.slurm import SlurmOptions, submission_text
from bgbias.study.spec import StudySpec
from bgbias.study.steps import page_step_id
from bgbias.study.worker import needed_steps


def describe_dry_run(folder: Path, spec: StudySpec, plan: StudyPlan, *, extend: bool = False,
                     slurm: SlurmOptions | None = None, device: str = "auto") -> str:
    """The dry run's text: the steps with their states, the cost of what is left (timed on ``device``), and
    with ``slurm`` the job arrays and their #SBATCH lines."""
    current = read_plan(folder)
    merged = merged_plan(current, folder, spec, plan, planned_shards(current, spec), extend=extend)
    goals = [page_step_id(plan)]
    note = known_size_note(spec)
    parts = [f"study folder {folder} ({spec.title}){'' if current else ': a new plan'}",
             *([note] if note else []),
             _steps_text(merged, goals),
             plan_cost(folder, merged, goals, device=device).table()]
    if slurm is not None:
        parts.append("the submission (nothing was submitted):\n"
                     + submission_text(folder, slurm_stages(merged, goals), slurm))
    return "\n\n".join(parts)


def _steps_text(plan: Plan, goals: list[str]) -> str:
    needed = needed_steps(plan, goals)
    summary = state_counts([plan.steps[step_id] for step_id in needed], ("done", "failed", "running",
                                                                          "pending"))
    lines = [f"{len(needed)} steps: {summary}"]
    lines += [f"  {step_id}: {plan.steps[step_id].state}" for step_id in needed]
    left = [step_id for step_id in needed if plan.steps[step_id].state not in FINISHED]
    if not left:
        lines.append("nothing is left to do")
    return "\n".join(lines)


def plan_cost(folder: Path, plan: Plan, goals: list[str], *, device: str,
              timer: Callable[..., ConfigTiming] | None = None) -> PlanCost:
    """What the steps of ``goals`` that are not done will cost on ``device`` (:mod:`bgbias.study.cost`):
    the runs timed per distinct configuration by ``timer`` (default
    :func:`~bgbias.study.cost_timing.time_config`; a run whose training finished costs its measurement
    alone), the prepare step, the masks shards left and the page."""
    device = str(resolve_device(device))
    needed = needed_steps(plan, goals)
    left = [step_id for step_id in needed if plan.steps[step_id].state != "done"]
    args = [step.run for step in (plan.steps[step_id] for step_id in left) if step.run is not None]
    runs = [arg.study_run() for arg in args]
    trained = [run.folder_name for run in runs if _trained(folder / run.folder_name)]
    costs = estimate_runs(plan.spec, runs, profile=any(arg.profile for arg in args), device=device,
                          explain_images=max((arg.explain_images for arg in args), default=0),
                          trained=trained, timer=timer or time_config) if runs else {}
    shards = [plan.steps[step_id] for step_id in needed if plan.steps[step_id].kind == "masks"]
    # A shard done before a second source was added made its own models' masks, which are kept.
    shards_left = Counter(_made_models(step) for step in shards if step.state != "done")
    masks = sum(estimate_masks(plan.spec, split_sizes(plan.spec).images * count // len(shards), device=device,
                               made=made) for made, count in shards_left.items())
    prepare = estimate_prepare(plan.spec, done=plan.steps["prepare"].state == "done")
    page = sum(estimate_page(len(plan.steps[step_id].needs)) for step_id in left
               if plan.steps[step_id].kind == "page")
    return PlanCost(runs, costs, prepare, masks, page, device)


def _made_models(step: Step) -> frozenset[str]:
    """The U²-Net models whose masks the masks step ``step`` made when it was last done (its inputs)."""
    return frozenset(filter(None, step.inputs.get("model", "").split("+")))


def _trained(run_dir: Path) -> bool:
    """Whether the run in ``run_dir`` finished its training (its ``run.json`` says so)."""
    record = read_record(RunDir(run_dir)) if run_dir.is_dir() else None
    return record is not None and record.status in DONE
