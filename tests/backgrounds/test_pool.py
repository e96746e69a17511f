"""Background pools: family assignment, pool contents, manifest, reproducibility and pool-folder checks."""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bgbias.assets.digest import sha256_file
from bgbias.backgrounds.pool import (
    GROUPS,
    assign_families,
    build_pools,
    kind_counts,
    list_pool,
    pool_folder,
)
from bgbias.backgrounds.sources import PhotoSource
from bgbias.errors import AssetError, DatasetError, ImageError, OptionError, SkippedEntriesWarning

SMALL = {"images_per_pool": 20, "long_side": 48}


def make_sources(folder: Path, photos: int = 4, patterns: int = 4) -> list[PhotoSource]:
    """Tiny photo-like (smooth noise, JPEG) and pattern (stripes, PNG) sources; photo 0 has a second size."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    sources = []
    for i in range(photos):
        coarse = rng.integers(0, 256, size=(6, 8, 3), dtype=np.uint8)
        image = Image.fromarray(coarse).resize((160, 120), Image.Resampling.BICUBIC)
        sizes = [(160, 120), (96, 72)] if i == 0 else [(160, 120)]
        for width, height in sizes:
            path = folder / f"photo{i}_{width}.jpg"
            image.resize((width, height)).save(path, quality=90)
            sources.append(PhotoSource(path, f"test:photo{i}_{width}", "CC0-1.0", "photo", f"photo{i}"))
    for i in range(patterns):
        stripes = np.zeros((90, 120, 3), dtype=np.uint8)
        stripes[:, (np.arange(120) // (4 + i)) % 2 == 1] = rng.integers(0, 256, size=3, dtype=np.uint8)
        path = folder / f"pattern{i}.png"
        Image.fromarray(stripes).save(path)
        sources.append(PhotoSource(path, f"test:pattern{i}", "CC-BY-4.0", "pattern", f"pattern{i}"))
    return sources


def _tree(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


# --- assign_families ----------------------------------------------------------------------------------------


def test_families_are_split_three_ways_disjointly_with_both_kinds(tmp_path: Path) -> None:
    sources = make_sources(tmp_path, photos=5, patterns=4)
    groups = assign_families(sources)
    assert set(groups) == set(GROUPS)
    families = {group: {s.family for s in members} for group, members in groups.items()}
    assert families["bench"].isdisjoint(families["train"])
    assert families["bench"].isdisjoint(families["test"])
    assert families["train"].isdisjoint(families["test"])
    assert sum(len(members) for members in groups.values()) == len(sources)
    for members in groups.values():
        assert {s.kind for s in members} == {"photo", "pattern"}
    photo0 = [g for g, members in groups.items() if any(s.family == "photo0" for s in members)]
    assert len(photo0) == 1 and sum(s.family == "photo0" for s in groups[photo0[0]]) == 2


def test_family_assignment_ignores_input_order(tmp_path: Path) -> None:
    sources = make_sources(tmp_path, photos=6, patterns=5)
    shuffled = list(sources)
    random.Random(4).shuffle(shuffled)
    assert assign_families(shuffled) == assign_families(sources)


def test_too_few_families_is_an_asset_error_naming_the_folder(tmp_path: Path) -> None:
    sources = make_sources(tmp_path, photos=2, patterns=4)
    with pytest.raises(AssetError, match="too few background source families") as caught:
        assign_families(sources)
    assert caught.value.path == str(tmp_path) and "bgbias assets" in caught.value.fix


# --- build_pools --------------------------------------------------------------------------------------------


def test_kind_counts_follow_the_papers_four_kinds() -> None:
    assert kind_counts(100) == {"solid": 15, "gradient": 15, "photo": 45, "pattern": 25}
    assert sum(kind_counts(37).values()) == 37
    with pytest.raises(OptionError, match="at least 4 images"):
        kind_counts(3)


def test_pools_have_the_counts_kinds_and_a_valid_manifest(tmp_path: Path) -> None:
    sources = make_sources(tmp_path / "src", photos=6, patterns=6)
    out = tmp_path / "backgrounds"
    manifest = build_pools(out, sources, seed=0, **SMALL)
    assert json.loads((out / "manifest.json").read_text()) == manifest
    expected = kind_counts(20)
    groups = assign_families(sources)
    for pool in ("train", "test"):
        entries = [e for e in manifest["images"] if e["pool"] == pool]
        assert Counter(e["kind"] for e in entries) == expected
        assert sorted(e["file"] for e in entries) == [f"{pool}/{p.name}" for p in list_pool(out / pool)]
        pool_families = {s.family for s in groups[pool]}
        by_origin = {s.origin: s for s in sources}
        for entry in entries:
            path = out / entry["file"]
            assert entry["sha256"] == sha256_file(path)
            with Image.open(path) as image:
                assert list(image.size) == entry["size"] and max(image.size) == SMALL["long_side"]
            if "generator" in entry:
                assert path.name.startswith("gen-") and path.suffix == ".png"
                assert entry["licence"] == "MIT" and entry["kind"] != "photo"
            else:
                source = by_origin[entry["origin"]]
                assert path.name.startswith("photo-") and path.suffix == ".jpg"
                assert source.family in pool_families and entry["licence"] == source.licence
                assert entry["source_sha256"] == sha256_file(source.path)
                left, top, right, bottom = entry["crop_box"]
                width, height = entry["source_size"]
                assert 0 <= left < right <= width and 0 <= top < bottom <= height
    train, test = ({sha256_file(path) for path in list_pool(out / pool)} for pool in ("train", "test"))
    assert not train & test


def test_rebuild_is_byte_identical_and_idempotent(tmp_path: Path) -> None:
    sources = make_sources(tmp_path / "src")
    first, second = tmp_path / "a", tmp_path / "b"
    build_pools(first, sources, seed=3, **SMALL)
    build_pools(second, sources, seed=3, **SMALL)
    assert _tree(first) == _tree(second)

    stamps = {p: p.stat().st_mtime_ns for p in first.rglob("*.*") if p.name != "manifest.json"}
    build_pools(first, sources, seed=3, **SMALL)
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # nothing rewritten
    assert _tree(first) == _tree(second)


def test_rebuild_repairs_damaged_files_and_removes_stale_ones(tmp_path: Path) -> None:
    sources = make_sources(tmp_path / "src")
    out = tmp_path / "bg"
    build_pools(out, sources, **SMALL)
    reference = _tree(out)
    (out / "train" / "gen-0001.png").write_bytes(b"damaged")
    (out / "test" / "photo-0001.jpg").unlink()
    (out / "test" / "photo-9999.jpg").write_bytes(b"left over")
    (out / "test" / "mine.jpg").write_bytes(b"user file")
    build_pools(out, sources, **SMALL)
    after = _tree(out)
    assert after.pop("test/mine.jpg") == b"user file"
    assert after == reference


def test_other_seed_gives_other_images(tmp_path: Path) -> None:
    sources = make_sources(tmp_path / "src")
    build_pools(tmp_path / "a", sources, seed=0, **SMALL)
    build_pools(tmp_path / "b", sources, seed=1, **SMALL)
    assert (tmp_path / "a/train/gen-0001.png").read_bytes() != (
        tmp_path / "b/train/gen-0001.png"
    ).read_bytes()


def test_unreadable_source_is_an_image_error_naming_it(tmp_path: Path) -> None:
    sources = make_sources(tmp_path / "src")
    for source in sources:
        source.path.write_bytes(b"not an image")
    with pytest.raises(ImageError) as caught:
        build_pools(tmp_path / "bg", sources, **SMALL)
    assert caught.value.path in {str(s.path) for s in sources}


# --- reading pools ------------------------------------------------------------------------------------------


def test_list_pool_reads_images_only_sorted(tmp_path: Path) -> None:
    for name in ("b.JPG", "a.png", ".hidden.png", "notes.txt", ".a.png.1234.tmp"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "sub.png").mkdir()
    assert [p.name for p in list_pool(tmp_path)] == ["a.png", "b.JPG"]


def test_list_pool_names_the_entries_it_cannot_use_and_keeps_the_rest(tmp_path: Path) -> None:
    Image.new("RGB", (4, 4)).save(tmp_path / "a.png")
    os.symlink("loop.jpg", tmp_path / "loop.jpg")
    odd = Path(os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9.jpg"))  # a name that is not valid UTF-8
    odd.write_bytes((tmp_path / "a.png").read_bytes())
    with pytest.warns(SkippedEntriesWarning) as caught:
        assert list_pool(tmp_path) == [tmp_path / "a.png"]
    (warning,) = caught
    assert warning.message.folder == str(tmp_path)
    assert [reason.split(" (")[0] for _, reason in warning.message.skipped] == [
        "the name is not valid UTF-8",
        "cannot be read",
    ]


def test_list_pool_missing_or_empty_folder_is_a_dataset_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="not found") as caught:
        list_pool(tmp_path / "nope")
    assert caught.value.path == str(tmp_path / "nope") and caught.value.fix
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "readme.txt").write_text("no images here")
    with pytest.raises(DatasetError, match="no images") as caught:
        list_pool(tmp_path / "empty")
    assert caught.value.path == str(tmp_path / "empty") and caught.value.fix


def test_pool_folder_prefers_the_named_sub_folder(tmp_path: Path) -> None:
    (tmp_path / "train").mkdir()
    assert pool_folder(tmp_path, "train") == tmp_path / "train"
    assert pool_folder(tmp_path, "test") == tmp_path


def test_list_pool_refuses_a_pool_missing_images_its_manifest_lists(tmp_path: Path) -> None:
    sources = make_sources(tmp_path / "src")
    out = tmp_path / "bg"
    build_pools(out, sources, **SMALL)
    assert len(list_pool(out / "train")) == SMALL["images_per_pool"]
    victim = sorted((out / "train").iterdir())[-1]
    victim.unlink()
    with pytest.raises(DatasetError, match="incomplete: 1 of the") as err:
        list_pool(out / "train")
    assert "bgbias assets backgrounds" in err.value.render()
    assert len(list_pool(out / "test")) == SMALL["images_per_pool"]


def test_missing_default_pools_are_made_in_the_working_folder_once(tmp_path: Path, monkeypatch) -> None:
    import functools

    import bgbias.backgrounds.pool
    from bgbias.corrupted.manifests import split_pool_dir

    sources = make_sources(tmp_path / "sources")
    monkeypatch.setattr(bgbias.backgrounds.pool, "background_sources", lambda: sources)
    monkeypatch.setattr(bgbias.backgrounds.pool, "build_pools", functools.partial(build_pools, **SMALL))
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    folder = split_pool_dir("test")
    assert folder.resolve() == (tmp_path / "work" / "backgrounds" / "test").resolve()
    assert len(list_pool(folder)) == len(list_pool(split_pool_dir("val"))) == SMALL["images_per_pool"]
    made = _tree(tmp_path / "work" / "backgrounds")
    monkeypatch.setattr(bgbias.backgrounds.pool, "background_sources", lambda: pytest.fail("built twice"))
    assert split_pool_dir("test") == folder and _tree(tmp_path / "work" / "backgrounds") == made


def test_missing_default_pools_without_installed_photos_name_the_fetch_command(tmp_path: Path,
                                                                                monkeypatch) -> None:
    import bgbias.backgrounds.pool
    from bgbias.corrupted.manifests import split_pool_dir

    # pool.py binds the name at import, so the patch goes where it is looked up.
    monkeypatch.setattr(bgbias.backgrounds.pool, "background_sources", lambda: [])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AssetError, match="no background photographs are installed") as raised:
        split_pool_dir("test")
    assert raised.value.path == str(tmp_path / "backgrounds")
    assert "`bgbias assets fetch`" in raised.value.fix and "backgrounds=DIR" in raised.value.fix
    assert "--backgrounds DIR" in raised.value.render({})
    assert not (tmp_path / "backgrounds").exists()
