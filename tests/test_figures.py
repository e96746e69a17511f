"""Figures as bgbias saves them: a figure that fits keeps its size and bytes, one whose text reaches past
its edges is enlarged until it fits (issue 35: a one-method chart lost its title's ends and two legend
entries)."""

from __future__ import annotations

import io

from PIL import Image

from bgbias.figures import DPI, new_figure, overflow, save_png
from tests.ink import edge_ink


def _chart(width: float, legend_entries: int):
    figure = new_figure(width, 3.0)
    axes = figure.add_subplot()
    for entry in range(legend_entries):
        axes.bar([entry], [entry + 1], label=f"a legend entry of some length {entry}")
    axes.set_title("a title as long as the legend under it, or nearly so")
    figure.legend(*axes.get_legend_handles_labels(), loc="outside lower center", ncols=legend_entries)
    return figure


def test_a_figure_that_fits_keeps_its_size_and_bytes(tmp_path):
    figure = _chart(12.0, 2)
    plain = io.BytesIO()
    figure.savefig(plain, format="png", dpi=DPI, metadata={"Software": None})
    png = save_png(figure, tmp_path / "fits.png").read_bytes()
    assert png == plain.getvalue()
    assert Image.open(io.BytesIO(png)).size == (12 * DPI, 3 * DPI)


def test_a_figure_whose_legend_is_wider_than_it_is_enlarged_until_everything_fits(tmp_path):
    figure = _chart(2.5, 4)
    png = save_png(figure, tmp_path / "grown.png").read_bytes()
    assert max(overflow(figure)) <= 0
    assert Image.open(io.BytesIO(png)).size[0] > 2.5 * DPI
    assert edge_ink(png) == (0, 0)
    legend = figure.legends[0]
    assert len(legend.get_texts()) == 4
    inside = figure.bbox
    assert all(inside.x0 <= text.get_window_extent().x0 and text.get_window_extent().x1 <= inside.x1
               for text in legend.get_texts())


def test_text_given_to_save_png_goes_into_the_png_and_no_software_stamp_does(tmp_path):
    figure = new_figure(2, 1)
    figure.subplots().plot([0, 1], [1, 0])
    path = save_png(figure, tmp_path / "drawn.png", {"bgbias-records": "997af4a620bea962"})
    with Image.open(path) as image:
        assert image.text == {"bgbias-records": "997af4a620bea962"}
