"""How the pages write a paired difference and its p-value: one way everywhere (the evaluation report, the
paste control's table, the study page, the audit page, the mask-sensitivity readings)."""

from __future__ import annotations

from bgbias.measurement.intervals import PairedDifference


def signed_points(found: PairedDifference | None) -> str:
    """A difference in points (%), signed, with its interval: ``+3.10 [+1.20, +5.00]``; empty where there is
    none."""
    if found is None:
        return ""
    interval = found.difference
    return f"{100 * interval.estimate:+.2f} [{100 * interval.low:+.2f}, {100 * interval.high:+.2f}]"


def shown_p_value(p_value: float | None) -> str:
    """A p-value as the tables give it: three decimals, or ``< 0.001``; empty where there is none."""
    return "" if p_value is None else "< 0.001" if p_value < 0.001 else f"{p_value:.3f}"


def p_cell(found: PairedDifference | None) -> str:
    """The p-value of a paired difference as the tables give it (:func:`shown_p_value`)."""
    return shown_p_value(None if found is None else found.p_value)
