"""``bgbias study --dry-run``: the plan the command would record, what of it is done, what the rest costs on
the target device, and for SLURM the submission it would make. Nothing is recorded or trained."""

from __future__ import annotations

from pathlib import Path

from bgbias.study.ledger import FINISHED, Plan, read_plan
from bgbias.study.pipeline import merged_plan, slurm_stages
from bgbias.study.plan import StudyPlan
from bgbias.study.slurm import SlurmOptions
from bgbias.study.spec import StudySpec
from bgbias.study.steps import mask_shards, page_step_id
from bgbias.study.worker import needed_steps


def describe_dry_run(folder: Path, spec: StudySpec, plan: StudyPlan, *, extend: bool = False,
                     slurm: SlurmOptions | None = None, device: str = "auto") -> str:
    """The dry run's text: the steps with their states, the cost of what is left (timed on ``device``), and
    with ``slurm`` the job arrays and their #SBATCH lines."""
    from bgbias.study.cost import describe_cost

    current = read_plan(folder)
    shards = sum(step.kind == "masks" for step in current.steps.values()) if current else mask_shards(spec)
    merged = merged_plan(current, folder, spec, plan, shards, extend=extend)
    goals = [page_step_id(plan)]
    parts = [f"study folder {folder} ({spec.title}){'' if current else ': a new plan'}",
             _steps_text(merged, goals),
             describe_cost(folder, merged, goals, device=device)]
    if slurm is not None:
        from bgbias.study.slurm import submission_text

        parts.append("the submission (nothing was submitted):\n"
                     + submission_text(folder, slurm_stages(merged, goals), slurm))
    return "\n\n".join(parts)


def _steps_text(plan: Plan, goals: list[str]) -> str:
    needed = needed_steps(plan, goals)
    counts = {state: sum(plan.steps[step_id].state == state for step_id in needed)
              for state in ("done", "failed", "running", "pending")}
    summary = ", ".join(f"{count} {state}" for state, count in counts.items() if count)
    lines = [f"{len(needed)} steps: {summary}"]
    lines += [f"  {step_id}: {plan.steps[step_id].state}" for step_id in needed]
    left = [step_id for step_id in needed if plan.steps[step_id].state not in FINISHED]
    if not left:
        lines.append("nothing is left to do")
    return "\n".join(lines)
