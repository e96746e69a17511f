"""The evaluation page's reading of the paste control: the drop in MAP@R split into paste cost and background
effect (:mod:`bgbias.measurement.decomposition`), each with its interval and p-value, as a small table."""

from __future__ import annotations

from bgbias.measurement.decomposition import MetricDecomposition
from bgbias.measurement.intervals import PairedDifference
from bgbias.measurement.record import Profile
from bgbias.report.differences import p_cell
from bgbias.report.document import Block, Heading, Paragraph, Table

PARTS = (("drop", "drop (clean − random-bg)"), ("paste_cost", "paste cost (clean − repasted)"),
         ("background_effect", "background effect (repasted − random-bg)"))
"""The table's rows: the field of :class:`MetricDecomposition` and its title."""


def decomposition_blocks(profile: Profile) -> list[Block]:
    """The MAP@R decomposition's heading, table and how to read it; nothing for a profile without one (made
    before the paste control)."""
    parts = (profile.decomposition or {}).get("map_at_r")
    if parts is None or parts.drop is None:
        return []
    level = round(100 * parts.drop.difference.level)
    rows = tuple((title, *_cells(getattr(parts, field)), _share(parts, field), _per_draw(parts, field))
                 for field, title in PARTS)
    return [
        Heading("Paste cost and background effect (MAP@R, points)"),
        Table(("", "difference", f"{level} % interval", "p-value", "share of the drop", "per draw"), rows),
        Paragraph(
            "The repasted set pastes each object back onto its own background (the hole under it inpainted) "
            "through the same mask and compositing as the corrupted sets, so it differs from the clean image "
            "only by the paste. The paste cost is what the compositing alone takes; the background effect is "
            "what the new backgrounds take beyond it; the two add up to the drop. Only a background effect "
            "whose interval excludes 0 is background reliance; a paste cost is the seam's, not the "
            f"background's. Intervals: bootstrap over the {parts.drop.queries} queries (and the corrupted "
            "draws); per draw: the background effect's mean ± std over the corrupted repeats."),
    ]


def _cells(part: PairedDifference | None) -> tuple[str, str, str]:
    if part is None:
        return "", "", ""
    found = part.difference
    return (_points(found.estimate), f"[{_points(found.low)}, {_points(found.high)}]",
            p_cell(part))


def _share(parts: MetricDecomposition, field: str) -> str:
    share = {"paste_cost": parts.paste_share, "background_effect": parts.background_share}.get(field)
    return "" if share is None else f"{100 * share:.0f} %"


def _per_draw(parts: MetricDecomposition, field: str) -> str:
    spread = parts.background_effect_per_draw
    if field != "background_effect" or spread.mean is None:
        return ""
    return _points(spread.mean) + ("" if spread.std is None else f" ± {_points(spread.std)}")


def _points(value: float) -> str:
    return f"{100 * value:.2f}"
