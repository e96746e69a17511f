"""The study page as a reader sees it, in headless Chromium (tests/report/chromium.py): no console errors,
every picture decoded and whole, the sections and tables present, and nothing wider than the window but a
table in its sideways-scrolling box; for a study of one method (the quick preset's page) and of ten (the
full preset's), at a laptop's width and a narrow one.

Issue 35 found, in the quick preset's page, a Table-1 chart cut at both sides (its title and two of its four
legend entries), tables cut at the page's right edge, and gallery titles cut short: each check here is of
that kind.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bgbias.attribution.heatmap import attribution_gallery
from bgbias.measurement.record import run_label
from bgbias.report.document import Figure
from bgbias.report.plots import plot_runs
from bgbias.report.study_report import StudyRunResult, write_study_report
from bgbias.study.plan import PAPER_BASELINES
from tests.report.chromium import NAMES, find_chromium, inspect_page
from tests.report.synthetic import changed, complete, explain_summary, make_report

pytestmark = [
    pytest.mark.slow,
    pytest.mark.required_in_ci,
    pytest.mark.skipif(find_chromium() is None, reason=(
        f"no Chromium on PATH ({', '.join(NAMES)}): install it (Debian: apt-get install -y "
        "--no-install-recommends chromium) to check the study page in a browser")),
]

METHODS = ("multi_similarity", "contrastive", "triplet", "proxy_anchor", "normalized_softmax", "arcface",
           "dcml", "sam", "metricformer", "avsl")
SECTIONS = ["Answers", "Clean vs corrupted MAP@R, without and with BGAugment",
            "BGAugment's effect over test queries and background draws, one training seed",
            "BGAugment's effect over training seeds, paired by seed",
            "Does a method's own mechanism shrink the drop without BGAugment?",
            "Rankings", "Background-reliance profile", "Foreground scores (the paper's Table 2)",
            "Model selection", "Figures", "Runs"]


def _study_page(folder: Path, methods: int, seeds: int) -> Path:
    """A study page of ``methods`` methods × ±BGAugment × ``seeds`` training seeds of synthetic scores, with
    the figures a study's page holds beside its own (the runs' chart, a foreground gallery of the first
    method's pair); the run folders are only named."""
    results = []
    for index, method in enumerate(METHODS[:methods]):
        for bgaugment in (False, True):
            for seed in range(seeds):
                draw = 100 * index + 10 * seed + bgaugment
                report = changed(complete(make_report(method, bgaugment, "bench", seed=draw)), seed=seed)
                key = (method, bgaugment, "bench", "smoothgrad")
                results.append(StudyRunResult(folder / f"{method}-{int(bgaugment)}-seed{seed}", report,
                                              {key: explain_summary("bench", 0.2 + 0.001 * draw, 0.05)}))
    first = [result.report for result in results if result.report.seed == 0]
    rng = np.random.default_rng(0)
    pictures = [rng.integers(0, 256, (48, 48, 3), dtype=np.uint8) for _ in range(3)]
    masks = [np.full((48, 48), 255, np.uint8)] * 3
    pair = {run_label(METHODS[0], bgaugment): [rng.random((48, 48)) for _ in range(3)]
            for bgaugment in (False, True)}
    figures = [
        Figure(plot_runs(first, folder / "runs.png"), "clean vs corrupted MAP@R of training seed 0's runs"),
        Figure(attribution_gallery(folder / "gallery.png", pictures, masks, pair, ["a", "b", "c"]),
               "where the first method's pair looks"),
    ]
    return write_study_report(results, folder / "report", title=f"a study of {methods} methods",
                              reference=PAPER_BASELINES, figures=figures)["study_html"]


@pytest.fixture(scope="module", params=[(1, 1), (10, 3)], ids=["1-1", "10-3"])
def study_page(request, tmp_path_factory) -> tuple[Path, int]:
    """A page of (methods, seeds), written once and read at each width; the number of its methods."""
    methods, seeds = request.param
    return _study_page(tmp_path_factory.mktemp("study-page"), methods, seeds), methods


@pytest.mark.parametrize("width", [1280, 600])
def test_the_study_page_reads_whole_in_chromium(study_page, width):
    page_file, methods = study_page
    view = inspect_page(page_file, width=width)
    page = view.probe
    assert view.errors == []
    assert page["headings"] == SECTIONS
    assert len(page["images"]) == 4  # Table 1's chart, the per-class histograms, the runs' chart, a gallery
    for image in page["images"]:
        assert image["decoded"] and image["width"] > 0, image["alt"]
        # A title or legend cut by the picture's edge leaves ink in its outermost columns.
        assert image["inkLeft"] == image["inkRight"] == 0, image["alt"]
        assert image["shown"] <= min(image["width"], width), image["alt"]  # scaled down, never cropped
    captions = [table["caption"] for table in page["tables"]]
    assert captions[:2] == ["mean ± std over training seeds",
                            "points of MAP@R, mean ± std over training seeds"]
    table_one = page["tables"][0]
    assert table_one["headers"][:2] == ["method", "training seeds"] and table_one["rows"] == methods
    for table in page["tables"]:
        assert table["inScrollBox"] and table["boxRight"] <= page["viewport"], table["caption"]
    assert page["overflowing"] == []
    assert page["pageWidth"] == page["viewport"]
