"""The ρ at which the bias dial's bench leaks as much as a measured dataset (docs/leakage.md, "Calibration
on the bias dial"): the curve of ``bgbias/configs/leakage_dial.json`` read back and inverted.

It is only ever inverted where it rises (the file is refused otherwise), a reading beyond either end is said
as such, not extrapolated, and a curve holds only for the encoder and fill it was measured with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from bgbias.schema import parse_record

CALIBRATION_FILE = Path(__file__).resolve().parent.parent / "configs" / "leakage_dial.json"
CALIBRATION_FORMAT = "bgbias-leakage-dial"


@dataclass(frozen=True)
class DialCurve:
    """The meter's leakage on the dial's benches at each ``rhos``, seen through ``encoder`` with ``fill`` and
    ``masks`` (the bench's exact masks or a saliency model's)."""

    encoder: str
    fill: str
    masks: str
    rhos: tuple[float, ...]
    leakage: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.rhos) < 2 or len(self.rhos) != len(self.leakage):
            raise ValueError(f"a dial curve needs two points or more, one leakage per ρ (got {self.rhos}, "
                             f"{self.leakage})")
        if any(b <= a for a, b in zip(self.rhos, self.rhos[1:], strict=False)):
            raise ValueError(f"the dial curve's ρ must rise (got {self.rhos})")
        if any(b <= a for a, b in zip(self.leakage, self.leakage[1:], strict=False)):
            raise ValueError(f"the dial curve of {self.encoder} ({self.fill}) does not rise with ρ "
                             f"({self.leakage}): it cannot be inverted")

    def rho_for(self, leakage: float) -> BenchRho:
        """The bench's ρ that leaks ``leakage`` on this curve (straight lines between its points), and whether
        ``leakage`` lies below its first point or above its last (then ρ is that end's)."""
        if math.isnan(leakage):
            return BenchRho(math.nan, below=False, above=False)
        rho = float(np.interp(leakage, self.leakage, self.rhos))
        return BenchRho(rho, below=leakage < self.leakage[0], above=leakage > self.leakage[-1])


@dataclass(frozen=True)
class BenchRho:
    """A ρ read off a dial curve; ``below`` / ``above``: the reading lay beyond the curve's first / last
    point, so the dataset leaks less than the bench at its lowest ρ / more than at its highest."""

    rho: float
    below: bool
    above: bool

    def words(self) -> str:
        if math.isnan(self.rho):
            return "–"
        return ("≤ " if self.below else "≥ " if self.above else "") + f"{self.rho:.2f}"


@dataclass(frozen=True)
class BenchEquivalent:
    """Where a dataset's leakage and its interval fall on the dial: the bench's ρ that leaks as much, with the
    ρ of the interval's ends, and the curve it was read from."""

    rho: BenchRho
    low: BenchRho
    high: BenchRho
    masks: str

    def words(self) -> str:
        return f"ρ {self.rho.words()} ({self.low.words()}–{self.high.words()})"


def bench_equivalent(leakage: float, interval: tuple[float, float], *, encoder: str, fill: str,
                     path: Path = CALIBRATION_FILE) -> BenchEquivalent | None:
    """The bench's ρ that leaks as much as ``leakage`` (and its ``interval``'s ends) on the dial curve of
    ``encoder`` and ``fill`` measured with the bench's exact masks; None where no such curve was measured."""
    curve = dial_curves(path).get((encoder, fill, "ground-truth"))
    if curve is None:
        return None
    return BenchEquivalent(curve.rho_for(leakage), curve.rho_for(interval[0]), curve.rho_for(interval[1]),
                           curve.masks)


@cache
def dial_curves(path: Path = CALIBRATION_FILE) -> dict[tuple[str, str, str], DialCurve]:
    """The curves of the calibration file by (encoder, fill, masks); none where the file is absent (a
    checkout where the calibration was never run)."""
    if not path.is_file():
        return {}
    again = "re-run `python benchmarks/leakage_dial.py` (the file ships with bgbias: reinstall it)"
    record = parse_record(path.read_text(encoding="utf-8"), path, dict[str, Any],
                          what="the leakage dial's calibration", fix=again, file_format=CALIBRATION_FORMAT)
    curves = [DialCurve(c["encoder"], c["fill"], c["masks"], tuple(map(float, c["rhos"])),
                        tuple(map(float, c["leakage"]))) for c in record["curves"]]
    return {(c.encoder, c.fill, c.masks): c for c in curves}
