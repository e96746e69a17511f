"""Two evaluation folders compared (bgbias.report.paired) from their per_query.csv, read back and validated
by bgbias.report.per_query."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from bgbias.errors import OptionError, RecordError
from bgbias.measurement.intervals import IntervalSettings, paired_difference
from bgbias.report.paired import APART_DRAWS, NO_DRAWS, PAIRED_DRAWS, compare_evaluations
from bgbias.report.per_query import read_per_query
from tests.report.synthetic import CLASS_SIZES, write_evaluation


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("evaluations")
    return {"chance": write_evaluation(root / "chance", pull=0.0),
            "better": write_evaluation(root / "better", pull=5.0, seed=7),
            "other-sets": write_evaluation(root / "other-sets", pull=5.0, seed=7, manifests="n")}


def _edited(folder, tmp_path, edit):
    """A copy of ``folder`` whose per_query.csv lines went through ``edit``."""
    copy = shutil.copytree(folder, tmp_path / "edited")
    path = copy / "per_query.csv"
    path.write_text("\n".join(edit(path.read_text().splitlines())) + "\n")
    return copy


def test_the_reader_gives_clean_and_corrupted_arrays_per_metric(folders):
    scores = read_per_query(folders["chance"])
    queries = sum(CLASS_SIZES)
    assert len(scores.ids) == len(scores.labels) == queries and scores.repeats == 2
    assert scores.clean["map_at_r"].shape == (queries,)
    assert scores.corrupted["r_precision"].shape == (2, queries)
    alone = scores.labels.index(str(10 + CLASS_SIZES.index(1)))  # the lone image: no score
    assert np.isnan(scores.clean["map_at_r"][alone])
    assert np.isnan(scores.corrupted["map_at_r"][:, alone]).all()


@pytest.mark.parametrize(("edit", "said"), [
    (lambda lines: [",".join(line.split(",")[:-1]) for line in lines], "lacks the column repeat1_precision"),
    (lambda lines: [lines[0], lines[1].replace(",0.", ",x0.", 1), *lines[2:]], "line 2 of the per-query file "
                                                                                "holds"),
    (lambda lines: [lines[0], lines[1].rsplit(",", 1)[0] + ",1.5", *lines[2:]], "not a score in [0, 1]"),
    (lambda lines: [lines[0], lines[1], lines[1], *lines[3:]], "lists the query 'img-000' twice"),
    (lambda lines: [lines[0], lines[1] + ",0.5", *lines[2:]], "line 2 of the per-query file has"),
    (lambda lines: ["label,id" + lines[0][len("id,label"):], *lines[1:]], "header starts"),
])
def test_the_reader_refuses_a_file_of_another_shape_and_names_it(folders, tmp_path, edit, said):
    copy = _edited(folders["chance"], tmp_path, edit)
    with pytest.raises(RecordError, match=said.replace("[", r"\[").replace("]", r"\]")) as error:
        read_per_query(copy)
    assert error.value.path == str(copy / "per_query.csv") and "bgbias eval" in error.value.fix


def test_two_evaluations_of_other_queries_are_refused(folders, tmp_path):
    renamed = _edited(folders["better"], tmp_path, lambda lines: [lines[0], lines[1].replace("img-000", "x"),
                                                                  *lines[2:]])
    with pytest.raises(OptionError, match="query 1 is 'img-000'"):
        compare_evaluations(folders["chance"], renamed)
    shorter = _edited(folders["better"], tmp_path / "b", lambda lines: lines[:-1])
    with pytest.raises(RecordError, match=r"report\.json 41"):  # its report still says 41 queries
        compare_evaluations(folders["chance"], shorter)


def test_identical_scores_differ_by_exactly_nothing_with_p_1(folders, tmp_path):
    copy = shutil.copytree(folders["chance"], tmp_path / "copy")
    found = compare_evaluations(folders["chance"], copy)
    assert found.draws == PAIRED_DRAWS and found.repeats == [2, 2] and found.intervals == IntervalSettings()
    for metric in found.metrics.values():
        for part in (metric.clean, metric.corrupted, metric.drop):
            assert (part.difference.estimate, part.difference.low, part.difference.high) == (0.0, 0.0, 0.0)
            assert part.p_value == 1.0 and part.queries == sum(CLASS_SIZES) - 1


def test_a_clearly_better_second_has_an_interval_above_zero(folders):
    found = compare_evaluations(folders["chance"], folders["better"])
    for part in (found.metrics["map_at_r"].clean, found.metrics["map_at_r"].corrupted):
        assert part.difference.low > 0.5 and part.p_value < 0.01
    reverse = compare_evaluations(folders["better"], folders["chance"], metrics=("map_at_r",))
    assert list(reverse.metrics) == ["map_at_r"]
    assert reverse.metrics["map_at_r"].clean.difference.estimate == pytest.approx(
        -found.metrics["map_at_r"].clean.difference.estimate)


def test_draws_are_paired_only_on_the_same_corrupted_sets(folders, tmp_path):
    assert compare_evaluations(folders["chance"], folders["other-sets"]).draws == APART_DRAWS
    clean_only = write_evaluation(tmp_path / "clean-only", repeats=0)
    found = compare_evaluations(folders["chance"], clean_only)
    assert found.draws == NO_DRAWS and found.repeats == [2, 0]
    assert found.metrics["map_at_r"].clean is not None and found.metrics["map_at_r"].corrupted is None


@pytest.mark.parametrize("manifests", ["m", "n"])
def test_each_difference_is_the_one_its_own_call_gives(folders, tmp_path, manifests):
    """The comparison resamples its differences in two batched calls; each must be bit for bit what one
    paired_difference call of its own gives, the draws paired only where the corrupted sets are the same
    (manifests "m", as the chance folder's)."""
    other = write_evaluation(tmp_path / "middling", pull=1.0, seed=3, manifests=manifests)
    found = compare_evaluations(folders["chance"], other)
    first, second = read_per_query(folders["chance"]), read_per_query(other)
    paired = manifests == "m"
    assert found.draws == (PAIRED_DRAWS if paired else APART_DRAWS)
    for metric, parts in found.metrics.items():
        drops = [scores.clean[metric][None] - scores.corrupted[metric] for scores in (first, second)]
        assert parts.clean == paired_difference(first.clean[metric], second.clean[metric])
        assert parts.corrupted == paired_difference(first.corrupted[metric], second.corrupted[metric],
                                                    paired_draws=paired)
        assert parts.drop == paired_difference(*drops, paired_draws=paired)
        # not vacuous: the other pairing of the draws gives other numbers
        assert parts.drop != paired_difference(*drops, paired_draws=not paired)
