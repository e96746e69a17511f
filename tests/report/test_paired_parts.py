"""The profile's variant sets in per_query.csv (written by bgbias.measurement.summary.per_query_table, read
back by bgbias.report.per_query) and the drop's two parts by the paste control compared between two
evaluations (bgbias.report.paired, bgbias.report.paired_parts)."""

from __future__ import annotations

import csv
import shutil

import numpy as np
import pytest

from bgbias.errors import OptionError, RecordError
from bgbias.measurement.intervals import paired_difference
from bgbias.measurement.summary import per_query_table
from bgbias.report.evaluation import write_evaluation_report
from bgbias.report.paired import PAIRED_DRAWS, compare_evaluations
from bgbias.report.per_query import read_per_query
from bgbias.retrieval.metrics import METRICS
from bgbias.variants.variants import VARIANTS
from tests.report.synthetic import (
    make_run,
    profile_variants,
    profiled_report,
    ranked_scores,
    write_evaluation,
)

VARIANT_COLUMNS = [f"{name}0_{metric}" for name in VARIANTS for metric in METRICS]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("profiled")
    return {"profiled": write_evaluation(root / "profiled", pull=1.0, repasted=0.9),
            "other": write_evaluation(root / "other", pull=1.0, seed=3, repasted=0.3),
            "plain": write_evaluation(root / "plain", pull=1.0, seed=3)}


def _header(folder):
    return (folder / "per_query.csv").read_text().splitlines()[0].split(",")


def test_the_variant_sets_are_written_after_the_repeats_and_read_back_equal(tmp_path):
    clean, corrupted, labels, ids = make_run(repeats=2)
    variants = profile_variants(clean, [ranked_scores(labels, 0.5, 9)])
    for offset, name in enumerate(("mixed-same", "mixed-rand")):  # drawn: as many sets as repeats
        variants[name] = [ranked_scores(labels, 0.4, 10 + 2 * offset + draw) for draw in range(2)]
    record = profiled_report(clean, corrupted, variants["repasted"], labels, ids, variants=variants)
    # given in another order than the registry's: written in the registry's
    write_evaluation_report(record, tmp_path, clean=clean, corrupted=corrupted, labels=labels, ids=ids,
                            variants=dict(reversed(variants.items())))
    header = _header(tmp_path)
    repeats_end = header.index("repeat1_precision_at_1") + 1
    assert header[repeats_end:repeats_end + 3] == [f"repasted0_{metric}" for metric in METRICS]
    assert header[header.index("mixed-same0_map_at_r"):][:6] == [
        f"mixed-same{draw}_{metric}" for draw in range(2) for metric in METRICS]
    read = read_per_query(tmp_path)
    assert list(read.variants) == list(VARIANTS)
    for name, draws in variants.items():
        for metric in METRICS:
            assert read.variants[name][metric].shape == (len(draws), len(ids))
            np.testing.assert_array_equal(read.variants[name][metric],
                                          np.stack([draw.per_query[metric] for draw in draws]))


def test_an_evaluation_without_the_profile_writes_and_reads_as_before(folders):
    clean, corrupted, labels, ids = make_run(repeats=1)
    assert list(per_query_table(clean, corrupted, labels, ids)) == [
        "id", "label", "r", *(f"{prefix}_{metric}" for prefix in ("clean", "repeat0") for metric in METRICS)]
    assert not any(column in VARIANT_COLUMNS for column in _header(folders["plain"]))
    assert read_per_query(folders["plain"]).variants == {}


def test_variant_scores_other_than_the_profiles_are_refused(tmp_path):
    clean, corrupted, labels, ids = make_run(repeats=1)
    record = profiled_report(clean, corrupted, [clean], labels, ids)
    with pytest.raises(OptionError, match="the repasted scores \\(2 draws\\)"):
        write_evaluation_report(record, tmp_path, clean=clean, corrupted=corrupted, labels=labels, ids=ids,
                                variants={"repasted": [clean, clean]})


@pytest.mark.parametrize(("edit", "said"), [
    (lambda header: [column.replace("only-fg0", "only-bg0") for column in header],
     "has the column only-bg0_map_at_r bgbias does not write"),
    (lambda header: header[:-1], "lacks the column mixed-rand0_precision_at_1"),
    (lambda header: [column.replace("repasted0", "repasted1") for column in header],
     "numbers the draws of repasted 1, not 0 to 0"),
])
def test_the_reader_refuses_variant_columns_of_another_shape(folders, tmp_path, edit, said):
    copy = shutil.copytree(folders["profiled"], tmp_path / "edited")
    path = copy / "per_query.csv"
    rows = list(csv.reader(path.open()))
    header = edit(rows[0])
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows([header, *(row[:len(header)] for row in rows[1:])])
    with pytest.raises(RecordError, match=said):
        read_per_query(copy)


def _hand_made(folder, tmp_path, name, paste_cost, background_effect):
    """A copy of ``folder`` whose per_query.csv holds scores made by hand: per query a clean score that
    varies, repasted = clean − ``paste_cost``, each corrupted draw = repasted − ``background_effect`` ∓ 0.02
    (every variant but the paste control at the clean score); the lone query stays unscored."""
    copy = shutil.copytree(folder, tmp_path / name)
    path = copy / "per_query.csv"
    rows = list(csv.reader(path.open()))
    header = rows[0]
    for number, row in enumerate(rows[1:]):
        if row[header.index("r")] == "0":
            continue
        clean = 0.5 + 0.01 * (number % 7)
        values = {"clean": clean, "repasted0": clean - paste_cost,
                  "repeat0": clean - paste_cost - background_effect - 0.02,
                  "repeat1": clean - paste_cost - background_effect + 0.02}
        for index, column in enumerate(header[3:], 3):
            prefix = next(column.removesuffix(f"_{metric}") for metric in METRICS if column.endswith(metric))
            row[index] = f"{values.get(prefix, clean):.4f}"
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    return copy


def test_the_parts_of_two_hand_made_evaluations_differ_by_what_they_were_made_with(folders, tmp_path):
    first = _hand_made(folders["profiled"], tmp_path, "first", paste_cost=0.1, background_effect=0.3)
    second = _hand_made(folders["profiled"], tmp_path, "second", paste_cost=0.1, background_effect=0.1)
    found = compare_evaluations(first, second)
    assert found.draws == PAIRED_DRAWS
    for metric, parts in found.metrics.items():
        effect, cost, drop = parts.background_effect, parts.paste_cost, parts.drop
        assert effect.difference.estimate == pytest.approx(-0.2), metric
        assert effect.difference.low == pytest.approx(-0.2) and effect.difference.high == pytest.approx(-0.2)
        assert effect.p_value < 0.01 and effect.queries == 40
        assert (cost.difference.estimate, cost.p_value) == (0.0, 1.0)
        assert drop.difference.estimate == pytest.approx(cost.difference.estimate
                                                         + effect.difference.estimate)


def test_each_part_is_the_one_its_own_call_gives_and_none_without_the_paste_control(folders):
    found = compare_evaluations(folders["profiled"], folders["other"])
    first, second = read_per_query(folders["profiled"]), read_per_query(folders["other"])
    for metric, parts in found.metrics.items():
        sides = [(scores.clean[metric][None] - scores.variants["repasted"][metric],
                  scores.variants["repasted"][metric] - scores.corrupted[metric])
                 for scores in (first, second)]
        assert parts.paste_cost == paired_difference(sides[0][0], sides[1][0])
        assert parts.background_effect == paired_difference(sides[0][1], sides[1][1])
        # the drop is the one the comparison gave before the parts were added to its batch
        drops = [scores.clean[metric][None] - scores.corrupted[metric] for scores in (first, second)]
        assert parts.drop == paired_difference(*drops)
    assert found.metrics["map_at_r"].background_effect.difference.estimate != 0
    for pair in ((folders["profiled"], folders["plain"]), (folders["plain"], folders["profiled"])):
        lacking = compare_evaluations(*pair).metrics["map_at_r"]
        assert lacking.paste_cost is None and lacking.background_effect is None
        assert lacking.drop is not None
