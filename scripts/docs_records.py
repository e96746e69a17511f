"""Every table and number of results in README.md and docs/ comes from a record under docs/data/.

A page holds marked regions that this script fills from the records; nothing inside a region is typed by hand,
so a number changed in its record changes every page that shows it (`--write`), and `--check` (run by
tests/test_docs_records.py) fails when a page and its records disagree or when a record's number also stands
in a page outside a region. The marker syntax is in docs/contributing.md (*Results in the docs*):

    <!-- table FILE#TABLE [columns=a; b>label; c] -->  a table (some columns, renamed), on the lines below
    <!-- /table -->
    <!-- value FILE#TABLE | ROW | COLUMN -->x<!-- /value -->   one cell, by the row's first cell and a column
    <!-- value FILE#KEY -->x<!-- /value -->                   one of the record's "values"
    <!-- source FILE -->x<!-- /source -->                     the record's command, date and machine

FILE is a JSON file under docs/data/, or view:NAME: a record computed by a registered function (@view) from
committed files outside docs/data (a calibration the package reads), so that their numbers are shown without
being copied. It holds named tables, each `{"columns": [...], "rows": [[...]]}`
with an optional `"align"` (l, r or c per column; default: the first column left, the others right), either
under `"tables"` or at its top level (so a study's own `seeds.json` is a record as it is), and optionally
`"values"` (name → text) and `"source"` (`command`, `date`, `machine`, `note`). Cells are text, shown as
written.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.util
import json
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data"

TABLE = re.compile(r"<!-- table (?P<ref>\S+)(?P<options>(?: \S[^\n]*?)?) -->\n(?P<body>.*?)<!-- /table -->",
                   re.S)
VALUE = re.compile(r"<!-- value (?P<ref>[^\n]+?) -->(?P<body>.*?)<!-- /value -->", re.S)
SOURCE = re.compile(r"<!-- source (?P<ref>\S+) -->(?P<body>.*?)<!-- /source -->", re.S)
REGIONS = (TABLE, VALUE, SOURCE)
# Code is shown as written: a marker inside a fenced block or an inline code span is an example, not a region.
CODE = re.compile(r"^[ \t]*(`{3,}|~{3,})[^\n]*\n.*?^[ \t]*\1[ \t]*$|`[^`\n]+`", re.M | re.S)
# A number a reader would take for a measurement: a decimal with at least three significant digits ("62.6",
# "0.535"); leading zeros are no precision, so a small std such as "0.003" is not taken for one.
MEASURED = re.compile(r"(?<![\d.])\d+\.\d+(?![\d.]*\d)")


FIX = "run python scripts/docs_records.py --write"


class RecordError(ValueError):
    """A marker names a record, table, row, column or value that does not exist."""


def pages() -> list[Path]:
    """README.md and every page of the docs site."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def load(file: str) -> dict:
    if file.startswith(VIEW):
        name = file.removeprefix(VIEW)
        if name not in VIEWS:
            raise RecordError(f"{file}: no such view (known: {', '.join(sorted(VIEWS))})")
        return VIEWS[name][1]()
    path = (DATA / file).resolve()
    if DATA.resolve() not in path.parents or path.suffix != ".json":
        raise RecordError(f"{file}: a record is a .json file under docs/data/")
    if not path.is_file():
        raise RecordError(f"{file}: no such record under docs/data/")
    return json.loads(path.read_text(encoding="utf-8"))


def tables_of(record: dict) -> dict:
    tables = record.get("tables", record)
    return {name: table for name, table in tables.items() if isinstance(table, dict) and "rows" in table}


def split_ref(ref: str) -> tuple[str, str]:
    file, _, key = ref.partition("#")
    return file, key


def table_of(ref: str) -> dict:
    file, name = split_ref(ref)
    tables = tables_of(load(file))
    if not name and len(tables) == 1:
        name = next(iter(tables))
    if name not in tables:
        raise RecordError(f"{ref}: {file} has no table {name!r} (it has: {', '.join(sorted(tables))})")
    return tables[name]


def cell_text(cell: object) -> str:
    return str(cell).replace("|", "\\|").replace("\n", " ")


def render_table(ref: str, options: str) -> str:
    table = table_of(ref)
    columns = list(table["columns"])
    align = list(table.get("align") or ["l", *["r"] * (len(columns) - 1)])
    picked = list(enumerate(columns))  # by position: two columns may share a heading ("ratio", "ratio")
    if options:
        key, _, value = options.partition("=")
        if key != "columns":
            raise RecordError(f"{ref}: unknown table option {key!r} (known: columns=a; b>label; c)")
        picked = []
        for entry in value.split(";"):
            name, _, label = (part.strip() for part in entry.partition(">"))
            if name not in columns:
                raise RecordError(f"{ref}: no column {name!r} (it has: {'; '.join(columns)})")
            picked.append((columns.index(name), label or name))
    indexes = [index for index, _ in picked]
    rule = {"l": "---", "r": "---:", "c": ":---:"}
    lines = ["| " + " | ".join(cell_text(label) for _, label in picked) + " |",
             "|" + "|".join(rule[align[i]] for i in indexes) + "|"]
    lines += ["| " + " | ".join(cell_text(row[i]) for i in indexes) + " |" for row in table["rows"]]
    return "\n".join(lines) + "\n"


def render_value(ref: str) -> str:
    head, *path = (part.strip() for part in ref.split("|"))
    file, key = split_ref(head)
    if not path:
        values = load(file).get("values", {})
        if key not in values:
            raise RecordError(f"{ref}: {file} has no value {key!r} (it has: {', '.join(sorted(values))})")
        return str(values[key])
    if len(path) != 2:
        raise RecordError(f"{ref}: a cell is named FILE#TABLE | ROW | COLUMN")
    row_name, column = path
    table = table_of(head)
    if column not in table["columns"]:
        raise RecordError(f"{ref}: no column {column!r} (it has: {'; '.join(table['columns'])})")
    rows = [row for row in table["rows"] if str(row[0]) == row_name]
    if len(rows) != 1:
        raise RecordError(f"{ref}: {len(rows)} rows start with {row_name!r}; a cell needs exactly one")
    return str(rows[0][table["columns"].index(column)])


def render_source(ref: str) -> str:
    source = load(ref).get("source")
    if not source:
        raise RecordError(f"{ref}: the record has no 'source'")
    text = f"`{source['command']}`, {source['date']}, {source['machine']}"
    return text + (f"; {source['note']}" if source.get("note") else "")


def regions(pattern: re.Pattern, text: str) -> Iterator[re.Match]:
    """The marked regions of one kind in ``text``, leaving out those inside code."""
    code = [match.span() for match in CODE.finditer(text)]
    for match in pattern.finditer(text):
        if not any(start <= match.start() < end for start, end in code):
            yield match


def substitute(pattern: re.Pattern, text: str, fill: Callable[[re.Match], str]) -> str:
    """``text`` with each region of ``pattern`` (outside code) replaced by ``fill(match)``."""
    pieces, last = [], 0
    for match in regions(pattern, text):
        pieces += [text[last:match.start()], fill(match)]
        last = match.end()
    return "".join([*pieces, text[last:]])


def render(text: str) -> str:
    """The page with every marked region filled from its record."""
    def table(m: re.Match) -> str:
        head = f"<!-- table {m.group('ref')}{m.group('options')} -->\n"
        return head + render_table(m.group("ref"), m.group("options").strip()) + "<!-- /table -->"

    text = substitute(TABLE, text, table)
    text = substitute(VALUE, text,
                      lambda m: f"<!-- value {m['ref']} -->{render_value(m['ref'])}<!-- /value -->")
    return substitute(SOURCE, text,
                      lambda m: f"<!-- source {m['ref']} -->{render_source(m['ref'])}<!-- /source -->")


def outside_regions(text: str) -> str:
    """The page with every marked region blanked, line breaks kept (for line numbers)."""
    for pattern in REGIONS:
        text = substitute(pattern, text, lambda m: re.sub(r"[^\n]", " ", m.group(0)))
    return text


def used_records(text: str) -> set[str]:
    refs = (m.group("ref").split("|")[0].strip() for pattern in REGIONS for m in regions(pattern, text))
    return {split_ref(ref)[0] for ref in refs}


def measured_numbers(record: dict, digits: int) -> set[str]:
    """The record's decimals of at least ``digits`` significant digits: those a reader takes for a
    measurement."""
    cells = [cell for table in tables_of(record).values() for row in table["rows"] for cell in row]
    cells += list(record.get("values", {}).values())
    numbers = (number for cell in cells for number in MEASURED.findall(str(cell)))
    return {number for number in numbers if len(number.replace(".", "").lstrip("0")) >= digits}


def all_records() -> list[str]:
    files = sorted(path.relative_to(DATA).as_posix() for path in DATA.rglob("*.json"))
    return files + [VIEW + name for name in sorted(VIEWS)]


@dataclass(frozen=True)
class Problem:
    page: Path
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}: {self.message}"


def numbers_everywhere() -> dict[str, str]:
    """Every record's decimals of four or more significant digits, by the record they belong to: each counts
    on every page."""
    return {number: file for file in all_records() for number in measured_numbers(load(file), 4)}


def stray_numbers(page: Path, text: str, everywhere: dict[str, str]) -> Iterator[Problem]:
    """A record's number standing in a page outside a region: typed by hand, it would drift. Any number of
    ``everywhere`` (:func:`numbers_everywhere`) counts, and a record's decimals of three significant digits
    on the pages that show that record."""
    numbers = dict(everywhere)
    for file in used_records(text):
        numbers.update(dict.fromkeys(measured_numbers(load(file), 3), file))
    bare = outside_regions(text)
    for match in MEASURED.finditer(bare):
        if match.group(0) in numbers:
            line = bare.count("\n", 0, match.start()) + 1
            file = numbers[match.group(0)]
            where = file if file.startswith(VIEW) else f"docs/data/{file}"
            yield Problem(page, line, f"{match.group(0)} is a number of {where}: "
                                      "show it with a <!-- value ... --> marker, or leave it out")


def problems() -> Iterator[Problem]:
    everywhere = numbers_everywhere()
    for page in pages():
        text = page.read_text(encoding="utf-8")
        try:
            rendered = render(text)
        except RecordError as error:
            yield Problem(page, 1, str(error))
            continue
        if rendered != text:
            pairs = zip([*text.splitlines(), ""], [*rendered.splitlines(), ""], strict=False)
            first = next(i for i, (old, new) in enumerate(pairs) if old != new)
            yield Problem(page, first + 1, f"differs from its records: {FIX}")
        yield from stray_numbers(page, text, everywhere)
        yield from markers_opening_a_line(page, text)
    yield from stale_figures()


def markers_opening_a_line(page: Path, text: str) -> Iterator[Problem]:
    """A value or source marker that opens a line: Markdown reads a line that starts with ``<!--`` as a block
    of raw HTML, which ends the paragraph or list item above it and leaves the line unformatted."""
    for match in (*regions(VALUE, text), *regions(SOURCE, text)):
        start = text.rfind("\n", 0, match.start()) + 1
        if not text[start:match.start()].strip():
            number = text.count("\n", 0, match.start()) + 1
            yield Problem(page, number, "a marker opens the line, so Markdown ends the paragraph there: "
                                        "move a word of the text before it onto this line")


# Views: records computed from committed files outside docs/data, named in markers as view:NAME.
VIEW = "view:"
VIEWS: dict[str, tuple[tuple[str, ...], Callable[[], dict]]] = {}


def view(name: str, *sources: str):
    """Register the function that computes the record view:NAME (``{"tables": ..., "values": ...}``) from
    the committed files SOURCES (paths from the repository's root; their digest dates the figures drawn from
    it)."""
    def register(compute):
        VIEWS[name] = (sources, compute)
        return compute
    return register


@functools.cache
def leakage_dial_script():
    """benchmarks/leakage_dial.py, which holds the dial's trained drops, their correlation and the plot."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "leakage_dial.py"
    spec = importlib.util.spec_from_file_location("leakage_dial", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@view("leakage-dial", "bgbias/configs/leakage_dial.json", "docs/data/leakage/dial-views.json",
      "docs/data/dial/dial.json", "benchmarks/leakage_dial.py")
def leakage_dial() -> dict:
    """The meter on the bias dial's benches (docs/leakage.md): the leakage and interval of each ρ and fill
    from the calibration the meter itself reads, beside the views' scores of the same runs (docs/data), the
    figures the page quotes from them, and the curves and trained drops the plots are drawn from."""
    script = leakage_dial_script()
    calibration = json.loads((ROOT / "bgbias/configs/leakage_dial.json").read_text(encoding="utf-8"))
    exact = {curve["fill"]: curve for curve in calibration["curves"] if curve["masks"] == "ground-truth"}
    scores = load("leakage/dial-views.json")["tables"]["views"]
    columns = scores["columns"]
    rows, values = [], {}
    for rho, fill, *rest in scores["rows"]:
        curve = exact[fill]
        at = curve["rhos"].index(float(rho))
        low, high = curve["intervals"][at]
        reading = script.pct(curve["leakage"][at])
        rows.append([rho, fill, f"{reading} [{script.pct(low)}, {script.pct(high)}]", *rest])
        values[f"{fill} at ρ {rho}"] = reading
        values[f"{fill} at ρ {rho} with interval"] = rows[-1][2].replace(" [", " % [", 1)
        values.update({f"{column}, {fill} at ρ {rho}": cell
                       for column, cell in zip(columns[2:], rest, strict=True)})
    foreground = sorted(float(row[columns.index("fg MAP@R")]) for row in scores["rows"])
    values["fg MAP@R range"] = f"{foreground[0]:.1f}–{foreground[-1]:.1f}"
    table = {"columns": [*columns[:2], "leakage [95 % interval]", *columns[2:]],
             "align": [*scores["align"][:2], "l", *scores["align"][2:]], "rows": rows}
    drops = script.recorded_drops("ground-truth")
    rhos = [f"{rho:g}" for rho in next(iter(exact.values()))["rhos"]]
    values.update({f"trained drop at ρ {rho:g}": f"{drop:.1f}" for rho, drop in drops.items()})
    values |= {"trained drops": ", ".join(f"{drop:.1f} %" for drop in drops.values()),
              "curve's ρ": f"{', '.join(rhos[:-1])} and {rhos[-1]}",
              "ρ between the dial's": " and ".join(rho for rho in rhos if float(rho) not in drops)}
    for fill, curve in exact.items():
        leakage = dict(zip(curve["rhos"], curve["leakage"], strict=True))
        values[f"{fill} spread"] = script.pct(max(leakage.values()) - min(leakage.values()))
        on_dial = script.correlations([leakage[rho] for rho in drops], list(drops.values()))
        values[f"{fill} pearson"] = f"{on_dial['pearson']:.3f}"
        values[f"{fill} spearman"] = f"{on_dial['spearman']:.1f}"
    return {"tables": {"exact": table}, "values": values, "curves": calibration["curves"],
            "drops": {masks: script.recorded_drops(masks) for masks in script.DOCS_MASKS}}


# Figures of results, each drawn from its records by a function registered here with bgbias.figures: the PNG
# carries the digest of the records it was drawn from, so a changed record makes a stale figure fail.
FIGURES: dict[str, tuple[tuple[str, ...], Callable[[list[dict], Path, dict], None]]] = {}


def records_digest(files: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    for file in files:
        sources = VIEWS[file.removeprefix(VIEW)][0] if file.startswith(VIEW) else ()
        for name, path in [(source, ROOT / source) for source in sources] or [(file, DATA / file)]:
            digest.update(name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def figure(name: str, *files: str):
    """Register the function that draws docs/images/NAME from the records FILES."""
    def register(draw):
        FIGURES[name] = (files, draw)
        return draw
    return register


@figure("full-over-seeds.png", "full-study/table1.json")
def draw_over_seeds(records: list[dict], path: Path, metadata: dict) -> None:
    """The full preset's Table 1 as bars: clean and corrupted MAP@R without and with BGAugment, ± one std."""
    from bgbias.figures import new_figure, save_png

    table = tables_of(records[0])["table1"]
    columns = table["columns"]
    series = [("vanilla clean", "vanilla, clean", "#b3c6e3"),
              ("vanilla corrupted", "vanilla, corrupted", "#4c72b0"),
              ("BGAugment clean", "BGAugment, clean", "#b9dcc0"),
              ("BGAugment corrupted", "BGAugment, corrupted", "#55a868")]
    figure_ = new_figure(13, 4.4)
    axes = figure_.subplots()
    width = 0.2
    for offset, (column, label, colour) in enumerate(series):
        cells = [row[columns.index(column)].split("±") for row in table["rows"]]
        means = [float(cell[0]) for cell in cells]
        stds = [float(cell[1]) if len(cell) > 1 else 0.0 for cell in cells]
        positions = [i + (offset - 1.5) * width for i in range(len(cells))]
        axes.bar(positions, means, width, yerr=stds, capsize=2, color=colour, label=label,
                 error_kw={"elinewidth": 1})
    axes.set_xticks(range(len(table["rows"])), [row[0] for row in table["rows"]], rotation=20, ha="right")
    axes.set_ylabel("MAP@R (%)")
    axes.set_title("bars: mean over training seeds; whiskers: ± one std over seeds", fontsize=10)
    figure_.legend(loc="outside lower center", ncol=4, frameon=False)
    save_png(figure_, path, metadata)


@figure("dial.png", "dial/dial.json")
def draw_dial(records: list[dict], path: Path, metadata: dict) -> None:
    """The bias dial's plot as `bgbias study --dial` draws it (bgbias.report.dial), from the dial's table:
    relative drop and corrupted MAP@R against ρ. One training seed, so no error bars (the table's ± is the
    spread of the corrupted repeats, which the plot does not show)."""
    from bgbias.figures import save_png
    from bgbias.report.dial import DialMark, dial_figure

    record = records[0]
    table = tables_of(record)["dial"]
    cells = [dict(zip(table["columns"], row, strict=True)) for row in table["rows"]]
    sources = {"exact": "ground-truth", "u2netp": "u2netp"}  # the table's names of the study's --masks
    curves: dict[tuple[str, bool], list[DialMark]] = {}
    for masks, source in sources.items():
        for bgaugment in (False, True):
            rows = [c for c in cells if c["masks"] == masks and c["run"].endswith("+ BGAugment") == bgaugment]
            curves[source, bgaugment] = [
                DialMark(float(c["ρ"]), (signed(c["relative drop"].rstrip(" %")), 0.0),
                         (signed(c["corrupted MAP@R"].split("±")[0]), 0.0))
                for c in sorted(rows, key=lambda c: float(c["ρ"]))]
    save_png(dial_figure(curves, record["method"]), path, metadata)


def signed(cell: str) -> float:
    """A number as the pages print it, with a typographic minus."""
    return float(cell.strip().replace("−", "-"))


def draw_leakage_dial(masks: str, record: dict, path: Path, metadata: dict) -> None:
    """The leakage dial's plot as benchmarks/leakage_dial.py draws it, from the calibration's curves."""
    script = leakage_dial_script()
    rows = [{"rho": rho, "fill": curve["fill"], "leakage": leakage, "interval": interval}
            for curve in record["curves"] if curve["masks"] == masks
            for rho, leakage, interval in zip(curve["rhos"], curve["leakage"], curve["intervals"],
                                              strict=True)]
    drops = {float(rho): drop for rho, drop in record["drops"][masks].items()}
    script.plot(rows, drops, path, script.MASK_LABELS[masks], metadata)


@figure("leakage-dial.png", "view:leakage-dial")
def draw_leakage_dial_exact(records: list[dict], path: Path, metadata: dict) -> None:
    """Leakage against ρ and against the trained drop, the dial's benches with their exact masks."""
    draw_leakage_dial("ground-truth", records[0], path, metadata)


@figure("leakage-dial-u2netp.png", "view:leakage-dial")
def draw_leakage_dial_u2netp(records: list[dict], path: Path, metadata: dict) -> None:
    """The same with u2netp's masks."""
    draw_leakage_dial("u2netp", records[0], path, metadata)


def stale_figures() -> Iterator[Problem]:
    for name, (files, _) in FIGURES.items():
        path = ROOT / "docs" / "images" / name
        if stale_figure(path, files):
            yield Problem(path, 1, f"was not drawn from the current {', '.join(files)}: {FIX}")


def stale_figure(path: Path, files: tuple[str, ...]) -> bool:
    from PIL import Image

    if not path.is_file():
        return True
    with Image.open(path) as image:
        return image.text.get("bgbias-records") != records_digest(files)


def write() -> None:
    for page in pages():
        text = page.read_text(encoding="utf-8")
        rendered = render(text)
        if rendered != text:
            page.write_text(rendered, encoding="utf-8")
            print(f"wrote {page.relative_to(ROOT)}")
    for name, (files, draw) in FIGURES.items():
        path = ROOT / "docs" / "images" / name
        if stale_figure(path, files):
            draw([load(file) for file in files], path, {"bgbias-records": records_digest(files)})
            print(f"drew docs/images/{name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="fill the pages and draw the figures first")
    if parser.parse_args(argv).write:
        write()
    found = list(problems())
    for problem in found:
        print(problem, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
