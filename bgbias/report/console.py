"""What the commands print: short, aligned summaries built from the library's result objects."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from bgbias.measurement.record import Checkpoint, EvaluationReport, Profile
from bgbias.report.evaluation import METRIC_TITLES, approximate_note, shown_p_value
from bgbias.report.table import format_table

if TYPE_CHECKING:
    from bgbias.assets.store import AssetStatus
    from bgbias.engine.training_loop import TrainResult


def format_dataset_summary(summary: Mapping[str, Any]) -> str:
    """Classes and images per split (the output of ``bgbias.data.registry.summarize``)."""
    rows = [[split, s["classes"], s["images"]] for split, s in summary["splits"].items()]
    rows.append(["all", summary["classes"], summary["images"]])
    head = f"{summary['name']} at {summary['root']} ({summary['protocol']} split)"
    tail = f"images with ground-truth masks: {summary['ground_truth_masks']}"
    return "\n".join([head, format_table(["split", "classes", "images"], rows), tail])


def format_asset_status(rows: Sequence[AssetStatus]) -> str:
    """One line per asset: state, size, pinned checksum (the file's, or the registry archive's), licence,
    location; problems listed underneath."""
    rows_out = [
        [r.name, _asset_state(r), f"{r.size / 1e6:.1f}", r.sha256[:16], r.licence, str(r.path)] for r in rows
    ]
    table = format_table(["asset", "state", "MB", "sha256 (pinned)", "licence", "path"], rows_out)
    problems = [f"  {r.name}: {r.problem}" for r in rows if r.problem]
    return "\n".join([table, *(["problems:", *problems] if problems else [])])


def _asset_state(row: AssetStatus) -> str:
    if not row.present:
        return "missing"
    return {True: "ok (sha256)", False: "DAMAGED", None: "present"}[row.verified]


def format_bench_summary(summary: Mapping[str, Any]) -> str:
    """Classes and images per split of the bench, its mean foreground fraction and background bias ρ."""
    splits = ("train", "val", "test")
    rows = [[s, summary["classes"][s], summary["images"][s]] for s in splits]
    totals = [sum(summary[key][s] for s in splits) for key in ("classes", "images")]
    rows.append(["all", *totals])
    return "\n".join(
        [
            f"bench at {summary['root']} (preset {summary['preset']}, seed {summary['seed']})",
            format_table(["split", "classes", "images"], rows),
            f"mean foreground fraction: {summary['mean_foreground_fraction']:.3f}",
            f"rho (share of views on their class's home background): {summary['rho']} requested, "
            f"{summary['home_view_fraction']:.3f} realised",
        ]
    )


def format_pools_summary(manifest: Mapping[str, Any], root: str) -> str:
    """Images per pool and kind, from the pools' manifest."""
    counts: dict[tuple[str, str], int] = {}
    for entry in manifest["images"]:
        counts[entry["pool"], entry["kind"]] = counts.get((entry["pool"], entry["kind"]), 0) + 1
    kinds = sorted({kind for _, kind in counts})
    pools = sorted({pool for pool, _ in counts}, reverse=True)
    rows = [[pool, *(counts.get((pool, k), 0) for k in kinds), sum(counts.get((pool, k), 0) for k in kinds)]
            for pool in pools]
    return "\n".join([f"background pools at {root}", format_table(["pool", *kinds, "total"], rows)])


def format_training_summary(result: TrainResult) -> str:
    """Validation MAP@R per epoch (epoch 0: the untrained model), the selected epoch and the run folder."""
    columns = {"val_map_at_r": "val MAP@R", "val_corrupted_map_at_r": "corrupted val MAP@R"}
    shown = [key for key in columns if any(key in row for row in result.history)]
    headers = ["epoch", "train loss", *(columns[key] for key in shown)]
    rows = [[row["epoch"], row.get("train_loss"), *(row.get(k) for k in shown)] for row in result.history]
    lines = [format_table(headers, rows)]
    if result.best_epoch:
        lines.append(f"best epoch {result.best_epoch} ({result.best_value:.4f}); {result.status}")
    else:
        lines.append(f"no epoch trained yet; {result.status}")
    lines.append(f"run folder: {result.run.root}")
    return "\n".join(lines)


def _model_origin(report: EvaluationReport) -> str:
    """Where the scored model came from, as the summary's title says it: a run's checkpoint epoch, an external
    model's kind and file or factory, nothing for a model in memory."""
    checkpoint, model = report.checkpoint, getattr(report, "model", None)  # the description is free-form
    if isinstance(checkpoint, Checkpoint) and checkpoint.epoch is not None:
        return f", checkpoint epoch {checkpoint.epoch}"
    if isinstance(model, Mapping):
        return f", {model['kind']} {model['spec']}"
    return ""


def format_evaluation_summary(report: EvaluationReport, files: Mapping[str, Any]) -> str:
    """Clean vs corrupted (mean ± std over repeats) per metric, the drop and its MAP@R interval, a warning
    where images' masks show no object, and where the report files are."""
    corrupted, drop = report.corrupted, report.drop
    headers = ["metric", "clean"]
    if corrupted:
        headers += [f"corrupted ({len(corrupted.repeats)} repeats)", "drop", "relative drop"]
    rows = []
    for key, name in METRIC_TITLES.items():
        row: list[object] = [name, getattr(report.clean, key)]
        if corrupted and drop is not None:
            relative = drop[key].relative
            row += [_mean_and_spread(getattr(corrupted.mean, key), getattr(corrupted.std, key)),
                    drop[key].absolute, "" if relative is None else f"{100 * relative:.1f} %"]
        rows.append(row)
    title = (f"{report.label} on {report.dataset} {report.split} "
             f"({report.images} images{_model_origin(report)})")
    lines = [title + approximate_note(report), format_table(headers, rows)]
    if report.scored == 0:
        lines.append("no image has another of its class: no query was scored, so there is no mean")
    paired = (report.confidence.drop or {}).get("map_at_r") if report.confidence else None
    if paired is not None:
        interval, p_value = paired.difference, shown_p_value(paired.p_value)
        lines.append(f"MAP@R drop {interval.estimate:.3f}, {100 * interval.level:g} % interval "
                     f"[{interval.low:.3f}, {interval.high:.3f}] over queries and background draws, "
                     f"p {p_value if p_value.startswith('<') else f'= {p_value}'}")
    empty = report.empty_masks
    if empty is not None and empty.images:
        without = empty.without.drop["map_at_r"].absolute if empty.without is not None else None
        lines.append(f"warning: {empty.images} of {report.images} images have a saliency mask that shows no "
                     "object (their corrupted copy is background alone); MAP@R drop without them: "
                     f"{'–' if without is None else f'{without:.3f}'} (report.md lists them)")
    if "report_md" in files:
        lines.append(f"report: {files['report_md']}")
    if report.profile is not None:
        lines += ["", format_profile_summary(report.profile)]
    return "\n".join(lines)


def _mean_and_spread(mean: float | None, std: float | None) -> str:
    """A mean over sets ± its standard deviation; empty where no query was scored (``None``)."""
    return "" if mean is None else f"{mean:.3f}" + ("" if std is None else f" ± {std:.3f}")


def format_profile_summary(profile: Profile) -> str:
    """The background-reliance profile: per set MAP@R, R-precision and P@1 (mean ± std over its sets)."""
    rows = [[row.set, row.repeats, *(_mean_and_spread(getattr(row.mean, key), getattr(row.std, key))
                                     for key in METRIC_TITLES)] for row in profile.sets]
    table = format_table(["profile set", "sets", *METRIC_TITLES.values()], rows)
    return f"{table}\n(worst case: the lowest of {profile.worst_k} backgrounds per query; see report.md)"
