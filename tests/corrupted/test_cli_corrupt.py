"""``bgbias corrupt`` end to end: manifests per repeat, identical for a seed, rendered images, gallery."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from bgbias.cli import main
from bgbias.data.items import mask_path
from bgbias.data.registry import open_dataset
from tests.replicas import make_bench


def _pools(folder):
    rng = np.random.default_rng(0)
    for pool in ("train", "test"):
        (folder / pool).mkdir(parents=True)
        for k in range(3):
            pixels = rng.integers(0, 256, (40, 60, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / pool / f"bg{k}.png")
    return folder


def _corrupt(*args):
    return CliRunner().invoke(main, ["corrupt", "--dataset", "bench", *args])


def _bench_with_masks(tmp_path):
    root = make_bench(tmp_path / "bench", train_classes=1, val_classes=1, test_classes=2, per_class=2)
    masks = tmp_path / "masks"
    for item in open_dataset("bench", root).items():  # the exact masks stand in for U²-Net's
        mask_path(item, masks).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(item.ground_truth_mask, mask_path(item, masks))
    return root, masks


def test_corrupt_command_writes_repeatable_manifests_and_renders(tmp_path):
    root, masks = _bench_with_masks(tmp_path)
    pools = _pools(tmp_path / "backgrounds")
    common = ["--root", str(root), "--backgrounds", str(pools), "--repeats", "2"]
    first = _corrupt(
        *common, "--out", str(tmp_path / "a"), "--render", str(tmp_path / "r"), "--masks", str(masks)
    )
    assert first.exit_code == 0, first.output
    _corrupt(*common, "--out", str(tmp_path / "b"))
    _corrupt(*common, "--seed", "1", "--out", str(tmp_path / "c"))
    for repeat in ("repeat-0.json", "repeat-1.json"):
        assert (tmp_path / "a" / repeat).read_bytes() == (tmp_path / "b" / repeat).read_bytes()
        assert (tmp_path / "a" / repeat).read_bytes() != (tmp_path / "c" / repeat).read_bytes()
    assert len(list((tmp_path / "r" / "repeat-0").rglob("*.png"))) == 4  # the test split's images
    assert (tmp_path / "r" / "gallery.png").is_file()


def test_corrupt_render_without_masks_names_the_masks_command(tmp_path):
    root = make_bench(tmp_path / "bench", train_classes=1, val_classes=1, test_classes=1, per_class=1)
    pools = _pools(tmp_path / "backgrounds")
    result = _corrupt(
        "--root",
        str(root),
        "--backgrounds",
        str(pools),
        "--repeats",
        "1",
        "--out",
        str(tmp_path / "m"),
        "--render",
        str(tmp_path / "r"),
        "--masks",
        str(tmp_path / "x"),
    )
    assert result.exit_code == 2
    assert "bgbias masks --dataset bench" in result.output


def test_corrupt_render_keeps_what_is_current_and_force_renders_everything_again(tmp_path):
    root, masks = _bench_with_masks(tmp_path)
    common = ["--root", str(root), "--backgrounds", str(_pools(tmp_path / "backgrounds")), "--repeats", "1",
              "--out", str(tmp_path / "m"), "--render", str(tmp_path / "r"), "--masks", str(masks)]
    assert "(4 rendered, 0 unchanged and kept)" in _corrupt(*common).output
    again = _corrupt(*common)
    assert again.exit_code == 0 and "(0 rendered, 4 unchanged and kept)" in again.output
    forced = _corrupt(*common, "--force")
    assert forced.exit_code == 0 and "(4 rendered, 0 unchanged and kept)" in forced.output


def test_corrupt_render_into_another_render_needs_force(tmp_path):
    root, masks = _bench_with_masks(tmp_path)
    common = ["--root", str(root), "--backgrounds", str(_pools(tmp_path / "backgrounds")), "--repeats", "1",
              "--out", str(tmp_path / "m"), "--render", str(tmp_path / "r"), "--masks", str(masks)]
    assert _corrupt(*common).exit_code == 0
    other = _corrupt(*common, "--seed", "1")
    assert other.exit_code == 2
    assert "another corrupted-set manifest" in other.output and "--force" in other.output
    forced = _corrupt(*common, "--seed", "1", "--force")
    assert forced.exit_code == 0, forced.output
    assert "(4 rendered, 0 unchanged and kept)" in forced.output


def test_corrupt_force_without_render_is_refused(tmp_path):
    result = _corrupt("--root", str(tmp_path / "bench"), "--force")
    assert result.exit_code == 2 and "add --render DIR" in result.output


@pytest.mark.slow
def test_a_table_row_that_climbs_out_is_rendered_inside_the_render_folder(tmp_path):
    """``img/k00/../../../x/c.png`` in a table once made ``corrupt --render`` write outside its folder."""
    rng = np.random.default_rng(0)
    table = tmp_path / "t"
    (table / "in" / "img" / "k00").mkdir(parents=True)
    (table / "x").mkdir()
    rows = {"img/k00/a.png": 0, "img/k00/b.png": 0, "img/k00/../../../x/c.png": 1,
            "img/k00/../../../x/d.png": 1}
    for row in rows:
        Image.fromarray(rng.integers(0, 256, (40, 60, 3), dtype=np.uint8)).save(table / "in" / row)
    csv = table / "in" / "images.csv"
    csv.write_text("path,label\n" + "".join(f"{row},{label}\n" for row, label in rows.items()))
    masks = tmp_path / "masks"
    for item in open_dataset("table", csv).items():
        mask_path(item, masks).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((40, 60), 255, dtype=np.uint8)).save(mask_path(item, masks))
    before = sorted(path for path in tmp_path.rglob("*") if path.is_file())
    render = tmp_path / "out" / "rend"
    result = CliRunner().invoke(main, ["corrupt", "--dataset", "table", "--root", str(csv), "--backgrounds",
                                       str(_pools(tmp_path / "backgrounds")), "--repeats", "1", "--out",
                                       str(tmp_path / "manifests"), "--render", str(render), "--masks",
                                       str(masks)])
    assert result.exit_code == 0, result.output
    made = sorted(path for path in tmp_path.rglob("*") if path.is_file() and path not in before)
    outside = [path for path in made if not path.is_relative_to(render)
               and not path.is_relative_to(tmp_path / "manifests") and "backgrounds" not in path.parts]
    assert outside == [] and len(list((render / "repeat-0").rglob("*.png"))) == 2
