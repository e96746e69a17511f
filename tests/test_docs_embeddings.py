"""docs/embeddings.md: its Python example runs as written, from a folder laid out as `bgbias study` leaves
it, and scores the embeddings it saved as the page says."""

from __future__ import annotations

from pathlib import Path

from tests.docs_blocks import code_block


def test_the_python_example_renders_embeds_and_scores(study_folder):
    block = code_block("docs/embeddings.md", "embeddings-from-python")
    done: dict = {}
    exec(compile(block.text, f"{block.page}:{block.line}", "exec"), done)
    saved = sorted(path.name for path in Path("emb").glob("*.npz"))
    assert saved == ["clean.npz", "repeat-0.npz", "repeat-1.npz"]
    report = done["result"].report
    assert report.method == "emb" and report.images == 12
    assert len(report.corrupted.repeats) == 2 and report.embeddings["l2_normalized"] is True
    assert 0 <= report.clean.map_at_r <= 1 and done["drop"] == report.drop["map_at_r"].relative
    assert done["result"].out_dir is None and not Path("emb", "report").exists()  # no out=: no file written
