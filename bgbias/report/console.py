"""What the commands print: short, aligned summaries built from the library's result objects."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from bgbias.report.table import format_table

if TYPE_CHECKING:
    from bgbias.assets.store import AssetStatus


def format_dataset_summary(summary: Mapping[str, Any]) -> str:
    """Classes and images per split (the output of ``bgbias.data.registry.summarize``)."""
    rows = [[split, s["classes"], s["images"]] for split, s in summary["splits"].items()]
    rows.append(["all", summary["classes"], summary["images"]])
    head = f"{summary['name']} at {summary['root']} ({summary['protocol']} split)"
    tail = f"images with ground-truth masks: {summary['ground_truth_masks']}"
    return "\n".join([head, format_table(["split", "classes", "images"], rows), tail])


def format_asset_status(rows: Sequence[AssetStatus]) -> str:
    """One line per asset: state, size, pinned checksum, licence, location; problems listed underneath.

    The checksum is the file's for single-file assets and the registry archive's for the others.
    """
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
