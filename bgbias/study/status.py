"""``bgbias study --status``: every step of the plan with its state, device and host, a run's epoch and best
validation MAP@R so far, the time it took or has taken and an estimate of what is left, and each failure's
error. It only reads (the plan and the runs' metrics), so it can be run while workers are at work."""

from __future__ import annotations

import time
from pathlib import Path

from bgbias.engine.config import load_run_config
from bgbias.engine.eta import duration
from bgbias.engine.run_dir import RunDir, read_metrics
from bgbias.errors import BgbiasError
from bgbias.report.markdown import table
from bgbias.study.ledger import Plan, Step, read_plan, required_plan, state_counts
from bgbias.study.worker import runs_progress


def _step_cells(folder: Path, step_id: str, step: Step, now: float) -> list[str]:
    """The status table's row of one step."""
    where = f"{step.device} on {step.host}" if step.host else ""
    if step.state == "running" and step.claim is not None:
        where += f" (pid {step.claim.pid})"
    elapsed = None
    if step.started is not None and step.state in ("running", "done", "failed"):
        ended = step.finished if step.finished is not None and step.state != "running" else now
        elapsed = ended - step.started
    progress, left = "", None
    if step.run is not None:
        progress, left = _run_progress(folder / step.run.study_run().folder_name, step, elapsed)
    return [step_id, step.state, where, progress, _duration(elapsed), _duration(left)]


def _run_progress(run_dir: Path, step: Step, elapsed: float | None) -> tuple[str, float | None]:
    """``epoch 3/8, best val MAP@R 61.2`` from the run's metrics, and the training time left at the pace of
    this start's epochs (None before its first epoch)."""
    if not (run_dir / "config.json").is_file():
        return "", None
    try:
        rows = read_metrics(RunDir(run_dir))
        epochs = load_run_config(run_dir / "config.json").schedule.epochs
    except BgbiasError:
        return "", None
    trained = [row for row in rows if row.epoch > 0]
    if not trained:
        return f"epoch 0/{epochs}", None
    scores = [row.columns[key] for row in rows for key in ("val_corrupted_map_at_r", "val_map_at_r")
              if isinstance(row.columns.get(key), float)]
    best = f", best val MAP@R {100 * max(scores):.1f}" if scores else ""
    done = trained[-1].epoch
    progress = f"epoch {done}/{epochs}{best}"
    if step.state != "running" or elapsed is None:
        return progress, None
    seconds = [row.columns.get("train_seconds") for row in trained]
    pace = sum(s for s in seconds if isinstance(s, float)) / len(trained)
    return progress, pace * max(0, epochs - done) if pace > 0 else None


def read_status(folder: Path) -> str:
    """The status of the study in ``folder`` as text (:func:`format_status`)."""
    return format_status(folder, required_plan(read_plan(folder), folder))


def format_status(folder: Path, plan: Plan) -> str:
    """The status table as text, then each failure's error, then the counts of steps by state."""
    now = time.time()
    cells = [_step_cells(folder, step_id, step, now) for step_id, step in plan.steps.items()]
    text = table(["step", "state", "where", "progress", "elapsed", "left (training)"], cells)
    failures = [f"- {step_id}: {(step.error or '').splitlines()[0]}" for step_id, step in plan.steps.items()
                if step.state == "failed"]
    summary = state_counts(plan.steps.values(), ("done", "running", "pending", "failed"))
    pages = [step_id for step_id, step in plan.steps.items() if step.kind == "page"]
    progress = runs_progress(plan, pages)
    parts = [f"study {folder} ({plan.spec.title}): {summary}{f'; {progress}' if progress else ''}", text]
    if failures:
        parts.append("failures (tracebacks in plan.json):\n" + "\n".join(failures))
    if plan.unstarted:
        lines = [f"- {w.device} on {w.host}, {time.strftime('%Y-%m-%d %H:%M', time.localtime(w.at))}: "
                 f"{w.error.splitlines()[0]}" for w in plan.unstarted]
        parts.append("workers that could not start:\n" + "\n".join(lines))
    return "\n\n".join(parts)


def _duration(seconds: float | None) -> str:
    return "" if seconds is None else duration(seconds)
