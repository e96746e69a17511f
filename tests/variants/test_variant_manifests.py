"""Variant manifests: donors drawn as the rules say, byte-identical for a seed, read back strictly; variant
images rendered on the fly equal the rendered files, and rendering resumes like the corrupted sets'."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from bgbias.cli import main
from bgbias.data.images import load_image, load_mask
from bgbias.data.items import mask_path
from bgbias.data.registry import open_dataset
from bgbias.data.splits import split_items
from bgbias.data.transforms import eval_geometry, eval_transform_pair
from bgbias.errors import AssetError, DatasetError, OptionError
from bgbias.variants.render_variants import render_variant_set
from bgbias.variants.variant_images import VariantImages
from bgbias.variants.variant_manifests import (
    ensure_variant_manifests,
    load_variant_manifest,
    make_sets,
    make_variant_manifests,
    sample_entries,
)
from bgbias.variants.variants import VARIANTS, render_variant
from tests.replicas import copy_ground_truth_masks, make_bench


@pytest.fixture
def bench4(tmp_path):
    """A bench whose test split has 4 classes of 3 images, and its masks."""
    dataset = open_dataset("bench", make_bench(tmp_path / "bench", 1, 1, 4, per_class=3))
    copy_ground_truth_masks(dataset.items(), tmp_path / "masks")
    return dataset


def _labels(dataset):
    return {item.id: item.label for item in split_items(dataset, "test")}


def test_mixed_same_draws_another_image_of_the_class_and_mixed_rand_one_of_another(bench4):
    items, label = split_items(bench4, "test"), _labels(bench4)
    for repeat in range(5):
        same = sample_entries(items, "mixed-same", seed=0, repeat=repeat)
        rand = sample_entries(items, "mixed-rand", seed=0, repeat=repeat)
        assert all(e.donor != e.id and label[e.donor] == label[e.id] for e in same)
        assert all(label[e.donor] != label[e.id] for e in rand)
    draws = [tuple(e.donor for e in sample_entries(items, "mixed-rand", 0, r)) for r in range(5)]
    assert len(set(draws)) == 5
    assert all(e.donor is None for e in sample_entries(items, "only-fg", 0, 0))


def test_donors_cover_the_choices_uniformly(bench4):
    items = split_items(bench4, "test")
    first = items[0]
    same = [sample_entries(items, "mixed-same", 0, r)[0].donor for r in range(300)]
    rand = [_labels(bench4)[sample_entries(items, "mixed-rand", 0, r)[0].donor] for r in range(300)]
    assert set(same) == {i.id for i in items if i.label == first.label} - {first.id}
    counts = np.unique(rand, return_counts=True)[1]
    assert len(counts) == 3 and counts.min() > 70  # 3 other classes, about 100 each


def test_an_image_alone_in_its_class_is_its_own_donor_and_one_class_has_no_other():
    from bgbias.data.items import Item

    lone = [Item(id="a", image=None, label=0, relpath=None), Item(id="b", image=None, label=1, relpath=None)]
    assert [e.donor for e in sample_entries(lone, "mixed-same", 0, 0)] == ["a", "b"]
    with pytest.raises(OptionError, match="at least two classes"):
        sample_entries(lone[:1], "mixed-rand", 0, 0)


def test_manifests_are_byte_identical_for_a_seed_and_fixed_sets_have_one_repeat(bench4, tmp_path):
    first = make_variant_manifests(bench4, "mixed-same", tmp_path / "a", repeats=3, seed=2)
    again = make_variant_manifests(bench4, "mixed-same", tmp_path / "b", repeats=2, seed=2)
    other = make_variant_manifests(bench4, "mixed-same", tmp_path / "c", repeats=1, seed=3)
    assert [p.read_bytes() for p in first[:2]] == [p.read_bytes() for p in again]
    assert first[0].read_bytes() != other[0].read_bytes()
    assert [p.name for p in make_variant_manifests(bench4, "only-bg-tiled", tmp_path / "d", repeats=5)] == [
        "repeat-0.json"]
    header = json.loads(first[0].read_text())["header"]
    assert header["variant"] == "mixed-same" and header["seed"] == 2 and "same class" in header["rule"]


def test_make_sets_puts_each_variant_beside_the_papers_repeats(bench4, tmp_path):
    from tests.bgaugment.conftest import write_pool

    write_pool(tmp_path / "pools" / "test", seed=2)
    made = make_sets(bench4, ["all"], repeats=2, backgrounds=tmp_path / "pools", out_dir=tmp_path / "m")
    assert list(made) == ["random-bg", *VARIANTS]
    assert made["random-bg"][1] == tmp_path / "m" / "repeat-1.json"
    assert made["mixed-rand"][1] == tmp_path / "m" / "mixed-rand" / "repeat-1.json"
    with pytest.raises(OptionError, match="unknown variant only-bg"):
        make_sets(bench4, ["only-bg"], out_dir=tmp_path / "n")


def test_load_round_trips_and_refuses_changed_fields(bench4, tmp_path):
    (path,) = make_variant_manifests(bench4, "mixed-rand", tmp_path, repeats=1)
    manifest = load_variant_manifest(path, bench4)
    assert manifest.variant.name == "mixed-rand" and len(manifest.entries) == 12
    data = json.loads(path.read_text())
    cases = [
        (lambda d: d["header"].update(rule="something else"), "header.rule"),
        (lambda d: d["header"].update(seed="0"), "header.seed"),
        (lambda d: d["images"][0].pop("donor"), r"images\[0\]\.donor must be a string, got nothing"),
        (lambda d: d["images"][0].update(donor=d["images"][0]["id"]), "does not allow"),
        (lambda d: d["images"][0].update(donor="nowhere.jpg"), "not in the split"),
        (lambda d: d["header"].update(count=3), "counts 3"),
    ]
    for change, message in cases:
        damaged = json.loads(json.dumps(data))
        change(damaged)
        path.write_text(json.dumps(damaged))
        with pytest.raises(AssetError, match=message):
            load_variant_manifest(path, bench4)


def test_a_changed_split_or_geometry_is_refused(bench4, tmp_path):
    (path,) = make_variant_manifests(bench4, "only-fg", tmp_path, repeats=1)
    from bgbias.data.geometry import EvalGeometry

    with pytest.raises(AssetError, match="evaluation geometry"):
        load_variant_manifest(path, bench4, EvalGeometry(64, 64))
    other = open_dataset("bench", make_bench(tmp_path / "other", 1, 1, 3, per_class=3))
    with pytest.raises(DatasetError, match="has changed"):
        load_variant_manifest(path, other)


def test_ensure_makes_missing_sets_and_refuses_a_renamed_one(bench4, tmp_path):
    geometry = eval_geometry("bench")
    made = ensure_variant_manifests(bench4, "mixed-same", tmp_path / "v", "test", 2, 0, "fixed", 0, geometry)
    assert [m.repeat for m in made] == [0, 1]
    before = made[1].path.read_bytes()
    assert ensure_variant_manifests(bench4, "mixed-same", tmp_path / "v", "test", 2, 0, "fixed", 0,
                                    geometry)[1].path.read_bytes() == before
    os.replace(made[0].path, made[1].path)
    with pytest.raises(AssetError, match="named for repeat 1 of the mixed-same variant of the test split but "
                                         "holds repeat 0 of the mixed-same variant of the test split"):
        ensure_variant_manifests(bench4, "mixed-same", tmp_path / "v", "test", 2, 0, "fixed", 0, geometry)



def test_ensure_refuses_a_set_of_another_seed_as_the_corrupted_sets_do(bench4, tmp_path):
    geometry = eval_geometry("bench")
    ensure_variant_manifests(bench4, "only-fg", tmp_path / "v", "test", 1, 3, "fixed", 0, geometry)
    written = (tmp_path / "v" / "repeat-0.json").read_bytes()
    with pytest.raises(AssetError, match="made with another seed than 0") as err:
        ensure_variant_manifests(bench4, "only-fg", tmp_path / "v", "test", 1, 0, "fixed", 0, geometry)
    assert err.value.parameter == "seed"
    assert (tmp_path / "v" / "repeat-0.json").read_bytes() == written

def test_variant_images_are_the_variant_of_the_cropped_image_and_donor(bench4, tmp_path):
    (path,) = make_variant_manifests(bench4, "mixed-rand", tmp_path / "m", repeats=1)
    manifest = load_variant_manifest(path, bench4)
    items = split_items(bench4, "test")
    images = VariantImages(items, manifest, tmp_path / "masks", "bench")
    by_id = {item.id: item for item in items}

    def cropped(item):
        return eval_transform_pair(load_image(item.image), load_mask(mask_path(item, tmp_path / "masks")),
                                   eval_geometry("bench"))

    for index in (0, 7):
        entry = manifest.entries[index]
        expected = render_variant("mixed-rand", *cropped(items[index]), *cropped(by_id[entry.donor]))
        assert np.array_equal(images.pixels(index), expected)
        assert np.array_equal(images[index]["image"].permute(1, 2, 0).numpy(), expected)
    with pytest.raises(DatasetError, match="donor images"):
        VariantImages(items[:2], manifest, tmp_path / "masks", "bench")


def test_rendering_writes_the_images_scored_and_redoes_those_whose_donor_changed(bench4, tmp_path):
    (path,) = make_variant_manifests(bench4, "mixed-same", tmp_path / "m", repeats=1)
    manifest = load_variant_manifest(path, bench4)
    masks = tmp_path / "masks"
    out = tmp_path / "render"
    first = render_variant_set(bench4, manifest, masks, out)
    assert (first.written, first.kept) == (12, 0)
    images = VariantImages(split_items(bench4, "test"), manifest, masks, "bench")
    png = out.joinpath(*images.items[3].relpath.with_suffix(".png").parts)
    assert np.array_equal(np.asarray(Image.open(png)), images.pixels(3))
    before = {p: p.read_bytes() for p in out.rglob("*.png")}
    assert render_variant_set(bench4, manifest, masks, out).kept == 12
    donor = images.by_id[manifest.entries[3].donor]
    stat = mask_path(donor, masks).stat()
    Image.new("L", Image.open(mask_path(donor, masks)).size, 0).save(mask_path(donor, masks))
    os.utime(mask_path(donor, masks), ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    again = render_variant_set(bench4, manifest, masks, out)
    users = sum(1 for e in manifest.entries if donor.id in (e.id, e.donor))
    assert (again.written, again.kept) == (users, 12 - users)
    assert {p: p.read_bytes() for p in out.rglob("*.png")} != before


@pytest.mark.slow
def test_corrupt_command_makes_renders_and_shows_every_variant(bench4, tmp_path):
    from tests.bgaugment.conftest import write_pool

    write_pool(tmp_path / "pools" / "test", seed=2)
    args = ["corrupt", "--dataset", "bench", "--root", str(bench4.root), "--repeats", "2", "--backgrounds",
            str(tmp_path / "pools"), "--out", str(tmp_path / "m"), "--masks", str(tmp_path / "masks"),
            "--render", str(tmp_path / "r"), "--variant", "random-bg", "--variant", "only-fg", "--variant",
            "mixed-same", "--variant", "repasted"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "m" / "mixed-same").iterdir()) == ["repeat-0.json",
                                                                                 "repeat-1.json"]
    assert len(list((tmp_path / "r" / "only-fg" / "repeat-0").rglob("*.png"))) == 12
    assert len(list((tmp_path / "r" / "mixed-same" / "repeat-1").rglob("*.png"))) == 12
    assert len(list((tmp_path / "r" / "repasted" / "repeat-0").rglob("*.png"))) == 12
    assert not (tmp_path / "m" / "repasted" / "repeat-1.json").exists()
    gallery = Image.open(tmp_path / "r" / "variants.png")
    assert gallery.size[0] > 6 * 96  # image, mask, random-bg, only-fg, mixed-same, repasted
    assert (tmp_path / "r" / "gallery.png").is_file()
    refused = CliRunner().invoke(main, [*args[:-6], "--variant", "only-bg"])
    assert refused.exit_code == 2 and "unknown variant only-bg" in refused.output


def test_the_inpainted_variant_is_one_set_of_its_rule_and_the_meters_background_view(bench4, tmp_path):
    from bgbias.leakage_meter.views import ViewImages

    (path,) = make_variant_manifests(bench4, "only-bg-inpainted", tmp_path / "m", repeats=3)
    assert path.name == "repeat-0.json"
    header = json.loads(path.read_text())["header"]
    assert header["variant"] == "only-bg-inpainted" and header["rule"] == VARIANTS["only-bg-inpainted"].rule
    manifest = load_variant_manifest(path, bench4)
    items = split_items(bench4, "test")
    variant = VariantImages(items, manifest, tmp_path / "masks", "bench")
    meter = ViewImages(items, "background", masks_dir=tmp_path / "masks", dataset_name="bench",
                       geometry=eval_geometry("bench"), fill="inpainted")
    for index in (0, 5, 11):
        assert np.array_equal(variant.pixels(index), meter.pixels(index))
    data = json.loads(path.read_text())
    data["header"]["rule"] = data["header"]["rule"].replace("0.02", "0.03")  # made with another dilation
    path.write_text(json.dumps(data))
    with pytest.raises(AssetError, match=r"header\.rule"):
        load_variant_manifest(path, bench4)


def test_the_paste_control_is_one_set_its_clean_crop_blended_onto_the_inpainted_variant(bench4, tmp_path):
    from bgbias.bgaugment.composite import composite_pixels

    (path,) = make_variant_manifests(bench4, "repasted", tmp_path / "m" / "repasted", repeats=3)
    header = json.loads(path.read_text())["header"]
    assert header["variant"] == "repasted" and header["rule"] == VARIANTS["repasted"].rule
    (inpainted_path,) = make_variant_manifests(bench4, "only-bg-inpainted", tmp_path / "m" / "i", repeats=3)
    items = split_items(bench4, "test")
    repasted, inpainted = (VariantImages(items, load_variant_manifest(p, bench4), tmp_path / "masks", "bench")
                           for p in (path, inpainted_path))
    for index in (0, 5, 11):
        image, mask = eval_transform_pair(load_image(items[index].image),
                                          load_mask(mask_path(items[index], tmp_path / "masks")),
                                          eval_geometry("bench"))
        pixels = repasted.pixels(index)
        assert np.array_equal(pixels, composite_pixels(image, mask, inpainted.pixels(index)))
        assert np.array_equal(pixels[mask == 255], image[mask == 255])
        assert not np.array_equal(pixels, image)  # the bench's masks are soft: the seam is there


def test_the_other_variants_manifests_keep_their_bytes(bench4, tmp_path):
    """The digests of the manifests made before only-bg-inpainted existed: adding a variant changes none of
    the others' files (nor so the evaluation cache's keys, which hold their sha256)."""
    import hashlib

    before = {"only-fg": ["9ef267ef32354c0b"], "only-bg-tiled": ["0ee576d01b766419"],
              "only-bg-black": ["8b5e75b595964dfb"], "mixed-same": ["453514fdcd5fdbf6", "917adcd9e0568caa"],
              "mixed-rand": ["5f08e89bf1d1d397", "bfde7ccdba5e1b89"]}
    for name, digests in before.items():
        paths = make_variant_manifests(bench4, name, tmp_path / name, repeats=2)
        assert [hashlib.sha256(path.read_bytes()).hexdigest()[:16] for path in paths] == digests, name
