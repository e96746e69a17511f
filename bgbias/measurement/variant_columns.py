"""The profile's variant sets as columns of ``per_query.csv``: ``{name}{draw}_{metric}``
(``repasted0_map_at_r``, ``mixed-same2_precision_at_1``, …) after the corrupted repeats' columns, the
variants in the registry's order (:data:`~bgbias.variants.variants.VARIANTS`, the profile's), each one's draws
in order, the metrics in :data:`~bgbias.retrieval.metrics.METRICS` order. One place names them, so the writer
(:func:`~bgbias.measurement.summary.per_query_table`) and the reader (:mod:`bgbias.report.per_query`) agree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from bgbias.retrieval.metrics import METRICS
from bgbias.variants.variants import VARIANTS, variant

VARIANT_COLUMN = re.compile(rf"({'|'.join(map(re.escape, VARIANTS))})(\d+)_({'|'.join(METRICS)})")
"""A variant's column: its name, its draw, the metric; names outside the registry do not match."""


def variant_order(names: Iterable[str]) -> list[str]:
    """``names`` in the registry's order; an unknown one is an ``OptionError`` listing the known."""
    order = list(VARIANTS)
    return sorted(names, key=lambda name: order.index(variant(name).name))


def variant_prefix(name: str, draw: int) -> str:
    """What a variant draw's columns start with, as ``repeat0`` starts a corrupted repeat's."""
    return f"{name}{draw}"


def variant_column(name: str, draw: int, metric: str) -> str:
    return f"{variant_prefix(name, draw)}_{metric}"


def variant_columns(draws: Mapping[str, int]) -> list[str]:
    """Every column of the variants with ``draws[name]`` draws each, in the file's order."""
    return [variant_column(name, draw, metric) for name in variant_order(draws)
            for draw in range(draws[name]) for metric in METRICS]
