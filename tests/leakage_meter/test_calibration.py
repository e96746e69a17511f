"""The bias dial's calibration curves: inverted for the bench's ρ that leaks as much as a dataset, only where
they rise, never beyond their ends, only for the encoder and fill they were measured with."""

from __future__ import annotations

import json
import math
from dataclasses import asdict

import pytest

from bgbias.leakage_meter.calibration import (
    CALIBRATION_FILE,
    CALIBRATION_FORMAT,
    DialCurve,
    bench_equivalent,
    dial_curves,
)
from bgbias.leakage_meter.meter import DEFAULT_ENCODER, DEFAULT_FILL
from bgbias.schema import format_header

CURVE = DialCurve("encoder (abcd1234)", "inpainted", "ground-truth", (0.0, 0.5, 1.0), (0.01, 0.2, 0.5))


def test_a_reading_between_two_points_is_read_on_the_straight_line_between_them():
    assert CURVE.rho_for(0.2).rho == pytest.approx(0.5)
    assert CURVE.rho_for(0.35).rho == pytest.approx(0.75)
    inside = CURVE.rho_for(0.1)
    assert inside.rho == pytest.approx(0.5 * 0.09 / 0.19) and not inside.below and not inside.above
    assert inside.words() == f"{0.5 * 0.09 / 0.19:.2f}"


def test_a_reading_beyond_either_end_is_said_as_such_not_extrapolated():
    low, high = CURVE.rho_for(0.0), CURVE.rho_for(0.8)
    assert (low.rho, low.below, low.words()) == (0.0, True, "≤ 0.00")
    assert (high.rho, high.above, high.words()) == (1.0, True, "≥ 1.00")
    assert math.isnan(CURVE.rho_for(float("nan")).rho) and CURVE.rho_for(float("nan")).words() == "–"


def test_a_curve_that_does_not_rise_cannot_be_inverted():
    with pytest.raises(ValueError, match="does not rise"):
        DialCurve("e", "tiled", "ground-truth", (0.0, 0.5, 1.0), (0.1, 0.3, 0.3))
    with pytest.raises(ValueError, match="ρ must rise"):
        DialCurve("e", "tiled", "ground-truth", (0.0, 1.0, 0.5), (0.1, 0.2, 0.3))


def _write(path, curves):
    path.write_text(json.dumps({**format_header(CALIBRATION_FORMAT), "curves": curves}), encoding="utf-8")
    dial_curves.cache_clear()


def test_only_the_curve_of_the_same_encoder_and_fill_with_exact_masks_gives_a_rho(tmp_path):
    path = tmp_path / "dial.json"
    exact = {"encoder": "enc (1)", "fill": "inpainted", "masks": "ground-truth", "rhos": [0, 1],
             "leakage": [0.0, 0.5]}
    _write(path, [exact, {**exact, "masks": "u2netp", "leakage": [0.0, 0.25]}])
    found = bench_equivalent(0.25, (0.2, 0.3), encoder="enc (1)", fill="inpainted", path=path)
    assert found is not None and found.masks == "ground-truth"
    assert (found.rho.rho, found.low.rho, found.high.rho) == pytest.approx((0.5, 0.4, 0.6))
    assert found.words() == "ρ 0.50 (0.40–0.60)"
    assert asdict(found)["rho"] == {"rho": 0.5, "below": False, "above": False}
    assert bench_equivalent(0.25, (0.2, 0.3), encoder="enc (2)", fill="inpainted", path=path) is None
    assert bench_equivalent(0.25, (0.2, 0.3), encoder="enc (1)", fill="black", path=path) is None
    assert bench_equivalent(0.25, (0.2, 0.3), encoder="enc (1)", fill="black", path=tmp_path / "none") is None


def test_the_shipped_calibration_holds_a_rising_exact_mask_curve_for_the_default_encoder_and_fill():
    dial_curves.cache_clear()
    curves = dial_curves(CALIBRATION_FILE)  # every curve in it rises: DialCurve refuses one that does not
    wanted = (DEFAULT_FILL, "ground-truth")
    default = [curve for (encoder, fill, masks), curve in curves.items()
               if encoder.startswith(f"{DEFAULT_ENCODER} (") and (fill, masks) == wanted]
    assert len(default) == 1 and default[0].rhos[0] == 0.0 and default[0].rhos[-1] == 1.0
