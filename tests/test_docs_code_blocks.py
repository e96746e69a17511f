"""Every fenced code block of README.md and docs/**/*.md is run by a test or says why not, and every
``bgbias`` command line in any block is one the command line accepts (issue 35, the docs as a site).

The line directly above a block's opening fence, at its indentation, is exactly ``<!-- run: ID -->`` (ID of
lowercase letters, digits and ``-``, unique across the pages; a test calls ``code_block("<page>", "ID")``
from tests/docs_blocks.py, both arguments written as literals, and runs the block) or
``<!-- not run: REASON -->`` with a reason ("trains for hours", "needs CUB", "shell output").
"""

from __future__ import annotations

import re
from pathlib import Path

import markdown
import pytest
import yaml

from tests.docs_blocks import ROOT, CodeBlock, code_blocks, pages, parse_blocks
from tests.docs_commands import command_lines, command_problems

TESTS = Path(__file__).resolve().parent


def policy_blocks() -> list[CodeBlock]:
    """The blocks of every page the policy covers."""
    return [block for page in pages() for block in code_blocks(page)]


def rendered_code_blocks(page: str) -> int:
    """How many code blocks the site shows for ``page``: the page rendered with mkdocs.yml's extensions."""
    extensions: dict[str, dict] = {}
    for entry in yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["markdown_extensions"]:
        extensions.update(entry if isinstance(entry, dict) else {entry: {}})
    html = markdown.markdown((ROOT / page).read_text(encoding="utf-8"), extensions=list(extensions),
                             extension_configs={name: config or {} for name, config in extensions.items()})
    return len(re.findall(r"<pre\b", html))


def marker_problems(blocks: list[CodeBlock]) -> list[str]:
    """``page:line: what is wrong`` for each block without a valid marker, with a run id another block has
    too, or not closed where it should be."""
    problems: list[str] = []
    first_with: dict[str, CodeBlock] = {}
    for block in blocks:
        where = f"{block.page}:{block.line}"
        if not block.closed:
            problems.append(f"{where}: the block is never closed; end it with a line `{block.fence}`")
        inner = next((number for number, line in block.lines() if re.fullmatch(
            rf"[ ]*{re.escape(block.fence)}[ \t]*[^`~\s]\S*.*", line)), None)
        if inner is not None:
            problems.append(f"{where}: line {inner} inside the block opens another one: close this block "
                            f"with a line `{block.fence}` before it")
        if block.run_id is not None:
            if block.run_id in first_with:
                first = first_with[block.run_id]
                problems.append(f"{where}: the run id {block.run_id!r} is also the one of {first.page}:"
                                f"{first.line}; give each block an id of its own")
            first_with.setdefault(block.run_id, block)
        elif block.not_run_reason is None:
            problems.append(f"{where}: the line above the fence is {block.marker!r}; it must be exactly "
                            "`<!-- run: ID -->` (ID: a-z, 0-9 and -; a test runs the block) or "
                            "`<!-- not run: REASON -->`, at the fence's indentation")
        elif not block.not_run_reason:
            problems.append(f"{where}: `<!-- not run: -->` gives no reason; say why the block is not run")
    return problems


def unrun_problems(blocks: list[CodeBlock], test_sources: str) -> list[str]:
    """``page:line: ...`` for each block marked run that no test calls ``code_block`` for."""
    return [f"{block.page}:{block.line}: the block is marked <!-- run: {block.run_id} --> but no test under "
            f"tests/ calls code_block(\"{block.page}\", \"{block.run_id}\"); add the test that runs it, or "
            "mark it <!-- not run: REASON -->"
            for block in blocks if block.run_id is not None and not _is_called(block, test_sources)]


def _is_called(block: CodeBlock, test_sources: str) -> bool:
    page, block_id = re.escape(block.page), re.escape(block.run_id or "")
    return re.search(rf"code_block\(\s*\"{page}\",\s*\"{block_id}\"\s*\)", test_sources) is not None


def command_line_problems(blocks: list[CodeBlock]) -> list[str]:
    """``page:line: what is wrong`` for each ``bgbias`` command line the command line would refuse."""
    return [f"{block.page}:{number}: {problem}" for block in blocks
            for number, words in command_lines(block) for problem in command_problems(words)]


def test_every_code_block_is_run_or_says_why_not():
    assert marker_problems(policy_blocks()) == []


@pytest.mark.slow
def test_every_code_block_the_site_shows_is_a_fenced_one():
    """An indented code block (four spaces) has no line above it for a marker; and a count that differs
    from the site's also catches a fence the parser reads otherwise than the site does."""
    counts = {page: (rendered_code_blocks(page), len(code_blocks(page))) for page in pages()}
    assert {page: f"the site shows {shown} code blocks, the page has {fenced} fenced ones: write an indented "
                  "block as a fenced one, with its marker" for page, (shown, fenced) in counts.items()
            if shown != fenced} == {}


def test_every_block_marked_run_is_run_by_a_test():
    sources = "\n".join(path.read_text(encoding="utf-8") for path in sorted(TESTS.rglob("*.py")))
    assert unrun_problems(policy_blocks(), sources) == []


def test_every_bgbias_command_line_matches_the_cli():
    """A command line is a line of any block (run or not; a line ending in ``\\`` joined with the next, a
    ``#`` comment dropped) split at ``&&``, ``||``, ``;`` and ``|``, whose first word (after shell words:
    ``do``, ``then``, ``else``, ``time``, ``nohup``, a ``$`` prompt, ``VAR=value``) is ``bgbias`` or ends in
    ``/bin/bgbias``; a second word ending in ``:`` makes it a diagram's label instead. Its command path must
    exist, every ``-x`` or ``--option`` must be one of the command it follows (options before a subcommand
    are the group's), and the written value of a choice option must be one of its choices.

    A placeholder, a word with ``...``, ``…``, ``<``, ``>``, ``$``, ``*``, ``[``, ``]``, ``{``, ``}`` or a
    leading ``~`` (``<folder>``, ``~/data/...``, ``$R/run``, ``[--flag]``), is never wrong: as an option's
    value it is not compared with the choices, and where a command name would be it ends the check (what
    follows belongs to an unknown command). Nothing is run: the words are matched against the click
    commands' parameters."""
    assert command_line_problems(policy_blocks()) == []


PAGE = """\
Intro.

<!-- run: first -->
```python
print(1)
```

```bash
echo unmarked
```

<!-- not run:  -->
~~~
empty reason
~~~

1. A step:

   <!-- not run: inside a list item -->
   ```bash
   bgbias study \\
     --preset full
   ```
2. Another:

<!-- run: first -->
   ```
   marked at the wrong indentation
   ```

<!-- run: first -->
````markdown
```python
a nested example
```
````

<!-- not run: left open -->
```bash
bgbias train
```bash
bgbias eval
"""


def test_the_parser_reads_fences_markers_and_list_indentation():
    blocks = parse_blocks("page.md", PAGE)
    assert [(block.line, block.language, block.fence) for block in blocks] == [
        (4, "python", "```"), (8, "bash", "```"), (13, "", "~~~"), (20, "bash", "```"), (27, "", "```"),
        (32, "markdown", "````"), (39, "bash", "```")]
    listed = blocks[3]
    assert listed.not_run_reason == "inside a list item"
    assert listed.text == "bgbias study \\\n  --preset full\n"
    assert blocks[4].marker == "" and blocks[5].text == "```python\na nested example\n```\n"
    assert blocks[0].run_id == "first" and blocks[0].lines() == [(5, "print(1)")]
    assert not blocks[-1].closed and blocks[-1].text == "bgbias train\n```bash\nbgbias eval\n"


def test_the_policy_names_each_bad_block_by_page_and_line():
    problems = marker_problems(parse_blocks("page.md", PAGE))
    assert [problem.split(": ", 1)[0] for problem in problems] == [
        "page.md:8", "page.md:13", "page.md:27", "page.md:32", "page.md:39", "page.md:39"]
    assert "''" in problems[0] and "<!-- run: ID -->" in problems[0]
    assert "gives no reason" in problems[1]
    assert "also the one of page.md:4" in problems[3]
    assert "never closed" in problems[4] and "line 41 inside the block" in problems[5]


def test_a_block_marked_run_needs_a_test_calling_code_block_with_its_page_and_id():
    (block,) = parse_blocks("docs/page.md", "<!-- run: the-example -->\n```python\npass\n```\n")
    called = 'x = code_block(\n    "docs/page.md", "the-example")\n'
    assert unrun_problems([block], called) == []
    (problem,) = unrun_problems([block], 'code_block("docs/other.md", "the-example")')
    assert problem.startswith("docs/page.md:2: ") and 'code_block("docs/page.md", "the-example")' in problem


def test_command_lines_are_checked_against_the_cli_without_running_them():
    page = """\
<!-- not run: example -->
```bash
bgbias study --preset full --seeds 3                 # fine
bgbias stduy --preset full
bgbias train --method dcml --bgaugmnet
bgbias eval --split tset --corrupted
bgbias assets bench --out data/b --nope
bash scripts/setup.sh && .venv/bin/bgbias study --dry-rn
bgbias train --method dcml \\
    --epochs 1 --wrong
for run in a b; do bgbias eval --checkpoint $R/$run --split <split> --x; done
bgbias --data-root ~/data train ... --workers 2 --set loss.x=-1
bgbias <command> --anything
BGBIAS_DATA=/d bgbias datasets --dataset=bench --protocol=cv4 -h
bgbias train: a diagram's label
echo bgbias --not-checked
$ bgbias methods --wrong \
```
"""
    (block,) = parse_blocks("page.md", page)
    problems = command_line_problems([block])
    assert [problem.split(": ", 1)[0] for problem in problems] == [f"page.md:{line}" for line in
                                                                   (4, 5, 6, 7, 8, 9, 11, 17)]
    assert "`bgbias` has no command `stduy`" in problems[0]
    assert "`bgbias train` has no option `--bgaugmnet`" in problems[1]
    assert "`bgbias eval --split` takes one of test, val, all, not `tset`" in problems[2]
    assert "`bgbias assets bench` has no option `--nope`" in problems[3]
    assert "`bgbias study` has no option `--dry-rn`" in problems[4]
    assert "`bgbias train` has no option `--wrong`" in problems[5]
    assert "`bgbias eval` has no option `--x`" in problems[6]
    assert "`bgbias methods` has no option `--wrong`" in problems[7]
