"""Report documents: exact Markdown per block, one HTML page that needs no other file, user text that never
becomes markup (only typed Strong and Code spans do), errors before anything is written, same bytes."""

from __future__ import annotations

import base64
import re

import pytest
from PIL import Image

from bgbias.errors import AssetError, OptionError
from bgbias.report.document import (
    Bullets,
    Code,
    Figure,
    Heading,
    Link,
    Paragraph,
    Strong,
    Table,
    to_html,
    to_markdown,
    write_document,
)


def _png(path, color=(200, 30, 30)):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (4, 3), color).save(path)
    return path


def _blocks(tmp_path):
    return [
        Heading("Results"),
        Paragraph(("The ", Strong("drop"), " is ", Code("12.5"), " points.")),
        Bullets(("clean", ("corrupted ", Code("x3")))),
        Table(("method", "MAP@R"), (("ms", "40.00"), ("a|b", "1.50")), caption="Scores"),
        Heading("Figures", 3),
        Figure(_png(tmp_path / "figures" / "drop.png"), "Drop per class"),
    ]


def test_markdown_of_each_block_kind(tmp_path):
    assert to_markdown(_blocks(tmp_path), tmp_path / "report") == (
        "## Results\n"
        "\n"
        "The **drop** is `12.5` points.\n"
        "\n"
        "- clean\n"
        "- corrupted `x3`\n"
        "\n"
        "*Scores*\n"
        "\n"
        "| method | MAP@R |\n"
        "|---|---:|\n"
        "| ms | 40.00 |\n"
        "| a\\|b | 1.50 |\n"
        "\n"
        "### Figures\n"
        "\n"
        "![Drop per class](../figures/drop.png)\n"
        "\n"
        "*Drop per class*\n"
    )


def test_figure_links_are_relative_to_the_markdown_folder(tmp_path):
    beside = Figure(_png(tmp_path / "report" / "a.png"), "a")
    below = Figure(_png(tmp_path / "report" / "plots" / "b.png"), "b")
    spaced = Figure(_png(tmp_path / "study plots" / "c d.png"), "c")
    markdown = to_markdown([beside, below, spaced], tmp_path / "report")
    assert "![a](a.png)" in markdown
    assert "![b](plots/b.png)" in markdown
    assert "![c](../study%20plots/c%20d.png)" in markdown


def test_html_needs_no_other_file(tmp_path):
    blocks = _blocks(tmp_path)
    page = to_html(blocks, "Study report")
    assert page.startswith("<!DOCTYPE html>") and '<meta charset="utf-8">' in page
    assert "<title>Study report</title>" in page and "<style>" in page
    assert "http://" not in page and "https://" not in page and "<link" not in page and "<script" not in page
    sources = re.findall(r'src="([^"]*)"', page)
    assert len(sources) == 1 and sources[0].startswith("data:image/png;base64,")
    assert base64.b64decode(sources[0].split(",", 1)[1]) == blocks[-1].path.read_bytes()
    assert '<figcaption>Drop per class</figcaption>' in page and 'alt="Drop per class"' in page
    assert "<caption>Scores</caption>" in page and "<li>corrupted <code>x3</code></li>" in page


def test_user_text_is_escaped_and_only_typed_spans_become_markup():
    page = to_html([
        Paragraph(("<script>alert(1)</script> is ", Strong("bold"), " and ", Code("a<b"),
                   ", **not** `this`")),
        Table(("class", "drop"), (("<script>x</script>", "**3.0**"),)),
        Heading('say "hi" & <b>'),
    ], "<b>title</b>")
    assert "<script" not in page
    assert ("<p>&lt;script&gt;alert(1)&lt;/script&gt; is <strong>bold</strong> and <code>a&lt;b</code>, "
            "**not** `this`</p>" in page)
    assert "<td>&lt;script&gt;x&lt;/script&gt;</td><td>**3.0**</td>" in page
    assert "<title>&lt;b&gt;title&lt;/b&gt;</title>" in page
    assert "say &quot;hi&quot; &amp; &lt;b&gt;</h2>" in page


def test_a_link_is_a_relative_encoded_target_with_its_text_escaped(tmp_path):
    link = Paragraph(("see ", Link("<b>report</b> [x](javascript:1)", "models/a b/report\"x.md")))
    assert to_markdown([link], tmp_path) == (
        "see [&lt;b&gt;report&lt;/b&gt; \\[x\\](javascript:1)](models/a%20b/report%22x.md)\n")
    page = to_html([link], "t")
    assert ('<p>see <a href="models/a%20b/report%22x.md">&lt;b&gt;report&lt;/b&gt; [x](javascript:1)</a></p>'
            in page)
    for target in ("/etc/passwd", "models\\a"):
        with pytest.raises(OptionError, match="a link's target is a relative POSIX path"):
            Link("x", target)


def test_every_column_but_the_first_is_right_aligned():
    page = to_html([Table(("set", "MAP@R", "P@1"), (("clean", "40.00", "60.00"),))], "t")
    assert re.search(r"th:not\(:first-child\), td:not\(:first-child\) \{ text-align: right;", page)
    assert re.search(r"th, td \{[^}]*text-align: left;", page)
    assert '<div class="table-wrap">' in page and re.search(r"\.table-wrap \{ overflow-x: auto;", page)


def test_every_table_scrolls_sideways_in_a_box_of_its_own_and_its_headers_wrap():
    # Table 1 of ten methods was wider than the page (issue 35): headers wrap at their spaces, the numbers
    # never do, and what is still too wide scrolls inside its box instead of widening the page.
    wide = Table(("method", *(f"a long header number {i}" for i in range(12))),
                 (("ms", *["61.00 ± 1.41"] * 12),))
    page = to_html([wide, Paragraph(("the run ", Code("runs/" + "x" * 300))), wide], "t")
    assert page.count("<table>") == page.count('<div class="table-wrap"><table>') == 2
    assert re.search(r"\.table-wrap \{ overflow-x: auto;", page)
    assert re.search(r"\ntd:not\(:first-child\) \{ white-space: nowrap; \}", page)
    assert not re.search(r"th[^{}]*\{[^}]*nowrap", page)
    assert re.search(r"code \{[^}]*overflow-wrap: anywhere;", page)  # a long folder name breaks, too


def test_table_of_contents_links_the_level_two_headings_by_their_ids():
    page = to_html([Heading("Results"), Heading("Per class: MAP@R (%)"), Heading("Details", 3),
                    Heading("Results")], "t")
    links = re.findall(r'<a href="#([^"]+)">', page)
    ids = re.findall(r'<h2 id="([^"]+)">', page)
    assert links == ids == ["results", "per-class-map-r", "results-2"]
    assert '<h3 id="details">Details</h3>' in page
    assert "<nav" not in to_html([Paragraph("no sections")], "t")


@pytest.mark.parametrize("content", [None, b"GIF89a not a png"])
def test_a_missing_or_non_png_figure_stops_before_anything_is_written(tmp_path, content):
    figure_path = tmp_path / "figures" / "drop.png"
    if content is not None:
        figure_path.parent.mkdir()
        figure_path.write_bytes(content)
    blocks = [Paragraph("text"), Figure(figure_path, "Drop per class")]
    out = tmp_path / "out"
    with pytest.raises(AssetError) as raised:
        write_document(blocks, out, "study", "Study")
    assert raised.value.path == str(figure_path) and "draws it again" in raised.value.fix
    assert not out.exists()
    for render in (lambda: to_markdown(blocks, out), lambda: to_html(blocks, "t")):
        with pytest.raises(AssetError):
            render()


@pytest.mark.parametrize("level", [0, 5])
def test_a_heading_level_outside_one_to_four_is_refused(level):
    with pytest.raises(OptionError, match=f"level {level}"):
        Heading("Results", level)


def test_a_ragged_row_is_refused_naming_it():
    with pytest.raises(OptionError, match=r"row 2 of the table 'Scores' has 1 cells for 2 headers"):
        Table(("method", "MAP@R"), (("ms", "40.00"), ("dcml",)), caption="Scores")


def test_write_document_writes_both_files_and_same_blocks_give_same_bytes(tmp_path):
    blocks = _blocks(tmp_path)
    first = write_document(blocks, tmp_path / "one", "study", "Study report")
    second = write_document(blocks, tmp_path / "two", "study", "Study report")
    assert first == {"study_md": tmp_path / "one" / "study.md", "study_html": tmp_path / "one" / "study.html"}
    markdown = first["study_md"].read_text(encoding="utf-8")
    assert markdown.startswith("# Study report\n\n## Results\n")
    assert markdown == second["study_md"].read_text(encoding="utf-8")
    assert first["study_html"].read_bytes() == second["study_html"].read_bytes()
    assert to_html(blocks, "Study report") == first["study_html"].read_text(encoding="utf-8")
