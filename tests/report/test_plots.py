"""Plots: PNG files of the fixed size, no software stamp, the same bytes for the same reports."""

from __future__ import annotations

import pytest
from PIL import Image

from bgbias.errors import OptionError
from bgbias.figures import DPI
from bgbias.report.plots import plot_clean_vs_corrupted, plot_per_class_drop, plot_runs
from tests.report.synthetic import complete, make_report


def _png(path):
    image = Image.open(path)
    assert image.format == "PNG"
    assert "Software" not in image.info
    return image


@pytest.mark.slow
def test_clean_vs_corrupted_and_per_class_drop_are_stable_pngs(tmp_path):
    report = complete(make_report("arcface", True, "cars"))
    for plot in (plot_clean_vs_corrupted, plot_per_class_drop):
        first = plot(report, tmp_path / f"{plot.__name__}-1.png")
        second = plot(complete(make_report("arcface", True, "cars")), tmp_path / f"{plot.__name__}-2.png")
        assert _png(first).size == (int(6.4 * DPI), int(4.0 * DPI))
        assert first.read_bytes() == second.read_bytes()
    other = plot_clean_vs_corrupted(complete(make_report("arcface", True, "cars", seed=4)),
                                    tmp_path / "other.png")
    assert other.read_bytes() != (tmp_path / "plot_clean_vs_corrupted-1.png").read_bytes()


def test_clean_only_report_plots_and_has_no_per_class_drop(tmp_path):
    report = complete(make_report("triplet", False, "cub", repeats=0))
    _png(plot_clean_vs_corrupted(report, tmp_path / "clean.png"))
    with pytest.raises(OptionError, match="no per-class drop") as error:
        plot_per_class_drop(report, tmp_path / "drop.png")
    assert "--corrupted" in str(error.value)
    assert not (tmp_path / "drop.png").exists()
    _png(plot_runs([report, complete(make_report("triplet", True, "cub", repeats=1))],
                   tmp_path / "runs.png"))


@pytest.mark.slow
def test_runs_plot_groups_datasets_and_refuses_duplicates(tmp_path):
    reports = [complete(make_report(method, bgaugment, dataset, seed=seed))
               for seed, (dataset, method, bgaugment) in enumerate(
                   [("cub", "triplet", False), ("cub", "triplet", True), ("cars", "triplet", True),
                    ("cub", "arcface", False), ("cars", "arcface", False)])]
    first = plot_runs(reports, tmp_path / "runs-1.png")
    second = plot_runs(reports, tmp_path / "runs-2.png")
    width, height = _png(first).size
    assert (width, height) == (int((1.5 + 2 * (0.9 + 0.75 * 3)) * DPI), int(4.4 * DPI))
    assert first.read_bytes() == second.read_bytes()
    with pytest.raises(OptionError, match="two evaluations"):
        plot_runs([*reports, reports[0]], tmp_path / "dup.png")
    with pytest.raises(OptionError, match="no evaluations"):
        plot_runs([], tmp_path / "none.png")
