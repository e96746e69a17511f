"""What the commands print: short, aligned summaries built from the library's result objects."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bgbias.report.table import format_table


def format_dataset_summary(summary: Mapping[str, Any]) -> str:
    """Classes and images per split (the output of ``bgbias.data.registry.summarize``)."""
    rows = [[split, s["classes"], s["images"]] for split, s in summary["splits"].items()]
    rows.append(["all", summary["classes"], summary["images"]])
    head = f"{summary['name']} at {summary['root']} ({summary['protocol']} split)"
    tail = f"images with ground-truth masks: {summary['ground_truth_masks']}"
    return "\n".join([head, format_table(["split", "classes", "images"], rows), tail])
