"""Known answers of the leakage meter on generated scenes (tests/leakage_meter/scenes.py), their exact masks
and a tiny random encoder: a background that is the class reads near full leakage, one drawn apart from the
class reads chance, and a black fill is caught leaking the object's silhouette where inpainting and tiling
are not."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from bgbias.data.table import image_table
from bgbias.errors import DatasetError, OptionError
from bgbias.leakage_meter.class_gallery import GALLERY_NEIGHBOURS, IMAGES_PER_CLASS
from bgbias.leakage_meter.meter import class_leakage, measure_leakage
from bgbias.schema import format_header
from tests.leakage_meter.scenes import Scenes, scene_samples, scenes, tiny_encoder
from tests.report.hostile import HOSTILE_CLASSES, assert_inert


@pytest.fixture()
def encoder(tmp_path):
    return tiny_encoder(tmp_path / "encoder")


def _leakage(tmp_path, encoder, background, shape, fill="inpainted", **options):
    table = scenes(background, shape, root=tmp_path)
    return measure_leakage(table, encoder, split="all", fill=fill, workers=0, **options)


def test_a_background_that_is_the_class_reads_near_full_leakage(tmp_path, encoder):
    result = _leakage(tmp_path, encoder, "class", "random")
    assert result.leakage > 0.95 and result.interval[0] > 0.9
    assert result.background.map_at_r > 0.95 and result.background.probe_accuracy > 0.95
    assert result.foreground.map_at_r - result.chance.map_at_r < 0.03  # shapes drawn apart from the class
    assert result.images == 48 and result.classes == 4
    assert all(row.background_map_at_r > 0.9 for row in result.per_class)


def test_backgrounds_drawn_apart_from_the_class_read_chance(tmp_path, encoder):
    result = _leakage(tmp_path, encoder, "random", "class")
    assert result.background.map_at_r - result.chance.map_at_r < 0.01
    assert result.background.probe_accuracy <= result.chance.probe_accuracy
    assert result.foreground.map_at_r - result.chance.map_at_r > 0.1  # the object's shape is the class
    assert result.leakage < 0.1 and result.interval[0] == 0.0


def test_a_black_fill_leaks_the_silhouette_that_inpainting_and_tiling_hide(tmp_path, encoder):
    by_fill = {fill: _leakage(tmp_path, encoder, "shared", "class", fill) for fill in ("black", "inpainted",
                                                                                       "tiled")}
    black = by_fill["black"]
    assert black.background.map_at_r - black.chance.map_at_r > 0.15
    assert black.background.probe_accuracy > 2 * black.chance.probe_accuracy
    for fill in ("inpainted", "tiled"):
        hidden = by_fill[fill]
        assert hidden.background.map_at_r - hidden.chance.map_at_r < 0.03
        assert black.interval[0] > hidden.leakage and black.leakage > hidden.interval[1]


@pytest.mark.slow
def test_nothing_is_written_without_out_and_out_gets_the_record_and_the_table(tmp_path, encoder):
    table = scenes("class", "random", root=tmp_path)
    before = sorted(tmp_path.rglob("*"))
    result = measure_leakage(table, encoder, split="all", workers=0)
    assert sorted(tmp_path.rglob("*")) == before
    again = measure_leakage(table, encoder, split="all", workers=0, out=tmp_path / "leakage")
    assert again == result  # seeded: the same numbers every time
    record = json.loads((tmp_path / "leakage" / "leakage.json").read_text())
    assert record["format"] == "bgbias-leakage-record" and record["leakage"] == pytest.approx(result.leakage)
    assert record["fill"] == "inpainted" and len(record["per_class"]) == 4
    # The dial was calibrated for the default encoder only: another gets no bench ρ, and is told why.
    assert result.bench_rho is None and record["bench_rho"] is None and record["version"] == 1
    assert record["masks"] is None and record["mask_maker"] is None  # each image came with its mask
    page = (tmp_path / "leakage" / "leakage.md").read_text()
    assert "comes from the background" in page and "| background only |" in page
    assert "No bench ρ" in page and "Empty saliency masks: none" in page
    assert "hole filled: inpainted; masks: each image's own." in page
    assert "](leakage-classes.png)" in page


@pytest.mark.slow
def test_out_gets_the_picture_of_the_classes_whose_background_gives_them_away(tmp_path, encoder):
    table = scenes("class", "random", root=tmp_path)
    measure_leakage(table, encoder, split="all", workers=0, out=tmp_path / "leakage")
    picture = Image.open(tmp_path / "leakage" / "leakage-classes.png")
    assert picture.format == "PNG"
    # The gallery's layout at 96 px tiles: 4 classes × IMAGES_PER_CLASS rows, a query and its neighbours each.
    cell, gap, label, query_gap, text = 96, 4, 64, 14, 14
    assert picture.size == (gap + label + cell + query_gap + GALLERY_NEIGHBOURS * (cell + gap),
                            text + gap + 4 * (text + IMAGES_PER_CLASS * (cell + gap) + gap))
    pixels = np.asarray(picture.convert("RGB"))
    green, red = np.array((30, 150, 60)), np.array((210, 40, 40))
    # The background is the class: every neighbour is of the query's class, framed green, none red.
    assert (pixels == green).all(axis=2).any() and not (pixels == red).all(axis=2).any()


def test_a_class_picture_shows_only_background_only_images(tmp_path, encoder):
    table = scenes("class", "random", root=tmp_path)
    measure_leakage(table, encoder, split="all", workers=0, fill="black", out=tmp_path / "leakage")
    pixels = np.asarray(Image.open(tmp_path / "leakage" / "leakage-classes.png").convert("RGB"))
    first_tile = pixels[14 + 4 + 14:14 + 4 + 14 + 96, 4 + 64:4 + 64 + 96]
    assert (first_tile.max(axis=2) < 8).any()  # the object's hole, filled black, is in the picture


def test_an_unknown_fill_and_a_split_of_one_class_are_refused(tmp_path, encoder):
    with pytest.raises(OptionError, match="unknown fill 'blur'"):
        _leakage(tmp_path, encoder, "class", "random", fill="blur")
    one_class = scenes("class", "random", per_class=3, root=tmp_path)
    one_class.rows = [row for row in one_class.rows if row[1] == 0]
    with pytest.raises(DatasetError, match="has one class") as err:
        measure_leakage(one_class, encoder, split="all", workers=0)
    assert "two classes or more" in err.value.fix


def test_classes_are_listed_by_what_their_background_retrieves_above_their_chance():
    labels = np.array([0, 0, 0, 1, 1, 2, 2, 2, 3])
    background = np.array([0.2, 0.2, 0.2, 1.0, 1.0, 0.5, 0.5, 0.5, np.nan])
    foreground = np.full(9, 0.3)
    chance = np.array([0.25] * 3 + [0.125] * 2 + [0.25] * 3 + [np.nan])
    rows = class_leakage(labels, background, foreground, chance)
    assert [row.label for row in rows] == [1, 2, 0]  # class 3 has one image: nothing to retrieve
    assert rows[0].images == 2 and rows[0].chance_map_at_r == pytest.approx(0.125)
    assert rows[2].leakage == pytest.approx(0.0)  # its background is below chance


def test_an_encoder_the_dial_was_calibrated_for_gets_the_bench_rho_that_leaks_as_much(tmp_path, encoder,
                                                                                      monkeypatch):
    import functools

    from bgbias.leakage_meter import calibration, meter

    curve = {"encoder": str(encoder.describe()["method"]), "fill": "inpainted", "masks": "ground-truth",
             "rhos": [0.0, 1.0], "leakage": [0.0, 1.0]}
    path = tmp_path / "dial.json"
    path.write_text(json.dumps({**format_header(calibration.CALIBRATION_FORMAT), "curves": [curve]}))
    calibration.dial_curves.cache_clear()
    monkeypatch.setattr(meter, "bench_equivalent", functools.partial(calibration.bench_equivalent, path=path))
    result = _leakage(tmp_path, encoder, "class", "random")
    assert result.bench_rho is not None
    assert result.bench_rho.rho.rho == pytest.approx(result.leakage)  # the curve is ρ = leakage
    assert (result.bench_rho.low.rho, result.bench_rho.high.rho) == pytest.approx(result.interval)
    assert f"leaks as much at **{result.bench_rho.words()}**" in result.markdown()


@pytest.mark.parametrize(("mask", "view", "words"), [
    (0, "foreground", "object only"), (255, "background", "background only")], ids=["empty", "full"])
def test_a_view_whose_images_all_embed_alike_is_reported_degenerate_not_read(tmp_path, encoder, mask, view,
                                                                             words):
    from tests.leakage_meter.scenes import Scenes, image_table, scene_samples

    samples = [(image, label, np.full_like(shape, mask))
               for image, label, shape in scene_samples("class", "random").samples]
    table = image_table(Scenes(samples), tmp_path)
    result = measure_leakage(table, encoder, split="all", workers=0, out=tmp_path / "out")
    scores = getattr(result, view)
    assert scores.degenerate == "all 48 images embed to one vector"
    assert np.isnan(result.leakage) and all(np.isnan(end) for end in result.interval)
    assert result.bench_rho is None and result.per_class == ()
    record = json.loads((tmp_path / "out" / "leakage.json").read_text())
    assert record["leakage"] is None and record[view]["degenerate"] == scores.degenerate
    page = (tmp_path / "out" / "leakage.md").read_text()
    assert f"No leakage is read: the {words} view is degenerate (all 48 images embed to one vector)" in page
    assert "% of what the background" not in page


@pytest.mark.slow
def test_classes_are_named_as_given_and_a_class_whose_masks_are_empty_is_flagged(tmp_path, encoder):
    samples = scene_samples("class", "random").samples
    names = ["galaxy", *HOSTILE_CLASSES[:3]]
    blank = [(image, names[label], np.zeros_like(mask) if label == 0 else mask)
             for image, label, mask in samples]  # u2netp found nothing in the galaxy photos
    table = image_table(Scenes(blank), tmp_path)
    result = measure_leakage(table, encoder, split="all", workers=0, out=tmp_path / "leakage")
    assert result.empty_masks == 12
    rows = {row.name: row for row in result.per_class}
    assert set(rows) == set(names) and rows["galaxy"].empty_masks == 12
    assert all(rows[name].empty_masks == 0 for name in names[1:])
    page = (tmp_path / "leakage" / "leakage.md").read_text()
    assert_inert(page, "leakage.md")
    assert "12 of 48 images have a saliency mask that shows no object (1 classes entirely" in page
    assert "| galaxy (" in page and "&lt;img src=x" in page
    record = json.loads((tmp_path / "leakage" / "leakage.json").read_text())
    assert record["empty_masks"] == 12 and {row["name"] for row in record["per_class"]} == set(names)
