"""Mask sensitivity (`bgbias eval --compare-masks`): the paper's corrupted repeats cut out with a second
source's masks from the same manifests, the paired difference and the masks' IoU, on a bench whose classes
differ by the colour of their object only, scored by a model that reads an image's mean colour: with the exact
masks it finds each object's class on any background, with masks that cut out nothing it finds none."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

import bgbias
from bgbias.data.items import mask_path
from bgbias.data.registry import open_dataset
from bgbias.data.splits import split_items
from bgbias.data.transforms import eval_geometry
from bgbias.errors import ImageError, OptionError
from bgbias.measurement.mask_sensitivity import mask_ious
from bgbias.report.evaluation import load_evaluation_report
from tests.replicas import OBJECT_BOX, make_bench

COLOURS = ((230, 30, 30), (30, 230, 30), (30, 30, 230))


@pytest.fixture(scope="module")
def coloured(tmp_path_factory) -> Path:
    """A bench whose 3 test classes (4 images each) hold an object of their class's colour on a random plain
    background, its exact masks in ``masks/``, masks that show nothing in ``empty/``, and a test pool."""
    base = tmp_path_factory.mktemp("coloured")
    root = make_bench(base / "bench", train_classes=1, val_classes=1, test_classes=3, per_class=4)
    rng = np.random.default_rng(0)
    items = split_items(open_dataset("bench", root), "test")
    for item in items:
        with Image.open(item.image) as old:
            size = old.size
        image = Image.new("RGB", size, tuple(int(v) for v in rng.integers(0, 256, 3)))
        ImageDraw.Draw(image).rectangle(OBJECT_BOX, fill=COLOURS[item.label % 3])
        image.save(item.image, quality=95)
        for folder, fill in (("masks", 255), ("empty", 0)):
            mask = Image.new("L", size, 0)
            ImageDraw.Draw(mask).rectangle(OBJECT_BOX, fill=fill)
            mask_path(item, base / folder).parent.mkdir(parents=True, exist_ok=True)
            mask.save(mask_path(item, base / folder))
    pool = base / "backgrounds" / "test"
    pool.mkdir(parents=True)
    for i in range(6):
        Image.fromarray(rng.integers(0, 256, (40, 56, 3), dtype=np.uint8)).save(pool / f"bg{i}.png")
    return base


def mean_colour(pixels):
    return pixels.mean(dim=(2, 3))


def _evaluate(base: Path, second: Path | None, out: Path | None, **options):
    return bgbias.evaluate(mean_colour, "bench", root=base / "bench", masks=base / "masks",
                           compare_masks=second, backgrounds=base / "backgrounds", repeats=2, workers=0,
                           fingerprint="mean-colour", device="cpu", out=out, **options)


@pytest.mark.slow
def test_the_same_masks_twice_differ_by_nothing_and_are_embedded_under_their_own_key(coloured, tmp_path):
    copy = shutil.copytree(coloured / "masks", tmp_path / "copy")
    result = _evaluate(coloured, copy, tmp_path / "out")
    assert result.embedded == 5  # clean, then 2 repeats with each masks folder: none taken from the other's
    sensitivity = result.report.mask_sensitivity
    assert sensitivity.corrupted.mean == result.report.corrupted.mean
    for paired in sensitivity.difference.values():
        assert (paired.difference.low, paired.difference.estimate, paired.difference.high) == (0, 0, 0)
        assert paired.p_value == 1 and paired.queries == 12
    agreement = sensitivity.agreement
    assert (agreement.images, agreement.mean, agreement.median, agreement.worst) == (12, 1, 1, 1)
    assert (sensitivity.first.masks, sensitivity.second.masks) == (str(coloured / "masks"), str(copy))
    assert _evaluate(coloured, copy, tmp_path / "out").embedded == 0  # each source's sets cached apart
    assert load_evaluation_report(result.files["report_json"]) == result.report


@pytest.mark.slow
def test_masks_that_cut_out_nothing_score_lower_beyond_chance_and_agree_nowhere(coloured, tmp_path):
    first = _evaluate(coloured, None, tmp_path / "out")
    result = _evaluate(coloured, coloured / "empty", tmp_path / "out")
    assert result.embedded == 2  # the second masks' repeats only: the first's came from the cache
    assert result.report.corrupted == first.report.corrupted
    sensitivity = result.report.mask_sensitivity
    assert result.report.corrupted.mean.map_at_r == 1
    assert sensitivity.corrupted.mean.map_at_r < 0.5
    paired = sensitivity.difference["map_at_r"]
    assert paired.difference.high < 0 and paired.p_value < 0.05
    assert paired.difference.estimate == pytest.approx(sensitivity.corrupted.mean.map_at_r - 1)
    agreement = sensitivity.agreement
    assert (agreement.mean, agreement.worst) == (0, 0) and len(agreement.worst_images) == 5
    page = result.files["report_md"].read_text()
    block = page.split("## How much do the masks decide", 1)[1].split("\n## ", 1)[0]
    assert f"| first: {coloured / 'masks'};" in block and f"| second: {coloured / 'empty'};" in block
    assert "| 100.00 ± 0.00 |" in block
    low, estimate, high = (100 * value for value in (paired.difference.low, paired.difference.estimate,
                                                     paired.difference.high))
    assert f"{estimate:+.2f} \\[{low:+.2f}, {high:+.2f}\\] points (95 % interval), p " in block
    assert "IoU 0.000 on average (median 0.000, worst 0.000) over 12 images" in block
    assert "How to read it: an interval that holds 0" in block


def test_a_shifted_mask_agrees_in_part_and_two_empty_masks_agree_fully(coloured, tmp_path):
    items = split_items(open_dataset("bench", coloured / "bench"), "test")[:2]
    for item in items:
        with Image.open(mask_path(item, coloured / "masks")) as exact:
            shifted = Image.new("L", exact.size, 0)
            shifted.paste(exact, (4, 0))
        mask_path(item, tmp_path / "shifted").parent.mkdir(parents=True, exist_ok=True)
        shifted.save(mask_path(item, tmp_path / "shifted"))
    geometry = eval_geometry("bench")
    ious = mask_ious(items, coloured / "masks", tmp_path / "shifted", "bench", geometry)
    assert np.all((ious > 0.5) & (ious < 0.9))  # 16 px wide, 4 px off: 12 / 20 at the image's own size
    assert np.all(mask_ious(items, coloured / "empty", coloured / "empty", "bench", geometry) == 1)


def test_a_second_masks_folder_that_is_missing_is_refused_naming_it(coloured, tmp_path):
    with pytest.raises(OptionError, match="the second masks folder does not exist") as refused:
        _evaluate(coloured, tmp_path / "nowhere", None)
    assert refused.value.path == str(tmp_path / "nowhere")
    assert "compare_masks=" in refused.value.fix and "bgbias masks --dataset bench" in refused.value.fix
    assert "--compare-masks" in refused.value.render({})


def test_masks_missing_for_some_images_are_named_before_anything_is_embedded(coloured, tmp_path):
    partial = shutil.copytree(coloured / "masks", tmp_path / "partial")
    missing = mask_path(split_items(open_dataset("bench", coloured / "bench"), "test")[3], partial)
    missing.unlink()
    with pytest.raises(ImageError, match="1 of 12 saliency masks are missing") as refused:
        _evaluate(coloured, partial, tmp_path / "out")
    assert missing.name in refused.value.problem and refused.value.path == str(partial)
    assert "compare_masks=DIR" in refused.value.fix
    assert not (tmp_path / "out" / "eval" / "cache").exists()


def test_a_second_masks_folder_needs_the_corrupted_repeats(coloured):
    with pytest.raises(OptionError, match="cuts out the corrupted repeats again, and none are scored"):
        _evaluate(coloured, coloured / "empty", None, corrupted=False)
