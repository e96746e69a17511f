"""Aggregating training seeds: means and stds over seeds kept apart from the repeats' std, and BGAugment's
paired effect against the seed spread, on reports with known numbers."""

from __future__ import annotations

import pytest

from bgbias.errors import OptionError
from bgbias.report.seeds import Spread, bgaugment_effects, exceeds_spread, seeds_table
from tests.report.synthetic import changed, complete


def _report(method, bgaugment, seed, clean, corrupted, *, repeats_std=0.01, epoch=8):
    return complete({
        "method": method, "bgaugment": bgaugment, "seed": seed, "dataset": "bench", "split": "test",
        "run": f"runs/{method}-{bgaugment}-{seed}", "checkpoint": {"epoch": epoch},
        "clean": {"map_at_r": clean, "precision_at_1": clean + 0.2},
        "corrupted": {"mean": {"map_at_r": corrupted, "precision_at_1": corrupted + 0.2},
                      "std": {"map_at_r": repeats_std}},
        "drop": {"map_at_r": {"relative": (clean - corrupted) / clean}},
    })


REPORTS = [
    _report("ms", False, 0, 0.60, 0.20, epoch=6), _report("ms", False, 1, 0.62, 0.22, repeats_std=0.03),
    _report("ms", True, 0, 0.58, 0.40), _report("ms", True, 1, 0.56, 0.40),
    _report("dcml", False, 0, 0.70, 0.25),
]


def test_scores_are_means_and_stds_over_seeds_and_the_repeats_std_is_separate():
    headers, rows = seeds_table(REPORTS)
    row = dict(zip(headers, rows[0], strict=True))
    assert row["method"] == "ms" and row["training seeds"] == "2 (0, 1)" and row["selected epochs"] == "6, 8"
    assert dict(zip(headers, rows[2], strict=True))["training seeds"] == "1 (0)"  # a count, then the ids
    assert row["clean MAP@R"] == "61.00 ± 1.41"  # 0.60 and 0.62: sample std 0.01414
    assert row["corrupted MAP@R"] == "21.00 ± 1.41"
    assert row["repeats std (mean over seeds)"] == "2.00"
    assert [r[0] for r in rows] == ["ms", "ms + BGAugment", "dcml"]
    assert dict(zip(headers, rows[2], strict=True))["clean MAP@R"] == "70.00"  # one seed: no std


def test_bgaugments_effect_is_paired_per_seed():
    headers, rows = bgaugment_effects(REPORTS)
    assert len(rows) == 1  # dcml has no BGAugment run
    row = dict(zip(headers, rows[0], strict=True))
    assert row["paired seeds"] == "2 (0, 1)"
    assert row["Δ corrupted MAP@R (BGAugment − vanilla)"] == "19.00 ± 1.41"  # +0.20 and +0.18
    assert row["Δ clean MAP@R"] == "-4.00 ± 2.83"  # -0.02 and -0.06
    assert row["larger than the seed spread"] == "yes"


def test_the_seed_spread_rule():
    assert exceeds_spread(Spread((0.20, 0.18))) == "yes"
    assert exceeds_spread(Spread((0.10, -0.05, 0.02))) == "no"
    assert exceeds_spread(Spread((0.20,))) == "n/a (one seed)"


def test_a_duplicate_seed_or_an_unrecorded_one_is_refused():
    with pytest.raises(OptionError, match="two runs of ms with seed 0"):
        seeds_table([REPORTS[0], REPORTS[0]])
    unseeded = changed(REPORTS[0], seed=None)
    with pytest.raises(OptionError, match="does not record its training seed"):
        seeds_table([unseeded])
    with pytest.raises(OptionError, match="several datasets"):
        seeds_table([REPORTS[0], changed(REPORTS[1], dataset="cub")])
