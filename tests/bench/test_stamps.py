"""Stamp selection: each of the rules of docs/bench-dataset.md keeps or drops exactly the stamps it should."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bgbias.bench.stamps import class_name_of, load_stamp, opaque_long_side, select_stamps
from bgbias.errors import AssetError, ImageError

KEPT = [
    "animals/birds/robin.png",
    "animals/fish/cod.png",
    "household/cup.png",  # greyscale + alpha, with a harmless .dat
    "vehicles/car.png",
    "plants/fern.png",
    "food/fruit/plum.png",
]
DROPPED = {
    "animals/birds/robin_mirror.png": "mirror copy",
    "animals/cartoon/cat.png": "cartoon folder",
    "symbols/star.png": "excluded category",
    "town/house.png": "excluded category",
    "food/fruit/apple.png": "colorable",
    "food/fruit/pear.png": "tintable run together with another flag",
    "plants/sprout.png": "too small",
    "plants/faint.png": "large but only faintly opaque",
    "food/pizza.png": "named reject",
}


def write_stamp(path: Path, size: tuple[int, int] = (140, 110), *, seed: int = 0, peak: int = 255) -> None:
    """An RGBA photo-like stamp: a textured ellipse with a soft alpha edge on a transparent canvas."""
    width, height = size
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    radius = ((xx - width / 2) / (width * 0.45)) ** 2 + ((yy - height / 2) / (height * 0.45)) ** 2
    alpha = np.clip((1.0 - radius) * 8, 0, 1) * peak
    base = rng.integers(40, 216, size=3)
    texture = (np.sin(xx / (3 + seed)) * 30 + np.cos(yy / 5) * 30)[..., None]
    rgb = np.clip(base + texture + rng.normal(0, 8, size=(height, width, 3)), 0, 255)
    rgba = np.concatenate([rgb, alpha[..., None]], axis=-1).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rgba, mode="RGBA").save(path)
    path.with_suffix(".txt").write_text("A test stamp.\n")


def make_stamps_tree(root: Path, kept: list[str] = KEPT) -> Path:
    """A stamps tree holding ``kept`` (all usable) and one stamp for every exclusion rule."""
    for i, relpath in enumerate(kept):
        write_stamp(root / relpath, size=(120 + 7 * i, 100 + 5 * i), seed=i)
    cup = root / "household/cup.png"
    if cup.exists():
        Image.open(cup).convert("LA").save(cup)
        cup.with_suffix(".dat").write_text("noflip\nscale 25%\n")
    for relpath in DROPPED:
        write_stamp(root / relpath, seed=len(relpath))
    (root / "food/fruit/apple.dat").write_text("colorable\n")
    (root / "food/fruit/pear.dat").write_text("nomirrortintable\n")
    write_stamp(root / "plants/sprout.png", size=(90, 99))
    write_stamp(root / "plants/faint.png", size=(200, 200), peak=120)
    return root


def test_selection_keeps_photos_and_applies_every_rule(tmp_path: Path) -> None:
    root = make_stamps_tree(tmp_path / "stamps")
    selected = select_stamps(root)
    assert [s.relpath for s in selected] == sorted(KEPT)
    assert all(s.long_side >= 100 and s.path == root / s.relpath for s in selected)


@pytest.mark.parametrize("relpath", sorted(DROPPED))
def test_each_rule_alone_drops_its_stamp(tmp_path: Path, relpath: str) -> None:
    root = make_stamps_tree(tmp_path / "stamps", kept=["animals/birds/robin.png"])
    assert relpath not in {s.relpath for s in select_stamps(root)}
    assert (root / relpath).is_file()


def test_opaque_long_side_counts_pixels_from_half_alpha() -> None:
    rgba = np.zeros((50, 300, 4), dtype=np.uint8)
    rgba[10:20, 5:250, 3] = 127
    rgba[10:20, 40:140, 3] = 128
    assert opaque_long_side(rgba) == 100
    assert opaque_long_side(np.zeros((5, 5, 4), dtype=np.uint8)) == 0


def test_class_names_are_unique_folder_safe_paths() -> None:
    assert class_name_of("animals/birds/robin.png") == "animals.birds.robin"
    assert class_name_of("people/fireman240a.png") != class_name_of("military/fireman240a.png")


def test_missing_stamps_folder_is_an_asset_error(tmp_path: Path) -> None:
    with pytest.raises(AssetError, match="stamps folder not found") as caught:
        select_stamps(tmp_path / "nowhere")
    assert caught.value.path == str(tmp_path / "nowhere") and "bgbias assets" in caught.value.fix


def test_tree_without_usable_stamps_is_an_asset_error(tmp_path: Path) -> None:
    write_stamp(tmp_path / "symbols/star.png")
    write_stamp(tmp_path / "animals/tiny.png", size=(40, 40))
    with pytest.raises(AssetError, match="no usable photo stamps") as caught:
        select_stamps(tmp_path)
    assert caught.value.path == str(tmp_path) and caught.value.fix


def test_corrupt_stamp_is_an_image_error_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "animals/broken.png"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    with pytest.raises(ImageError) as caught:
        select_stamps(tmp_path)
    assert caught.value.path == str(bad)
    with pytest.raises(ImageError):
        load_stamp(bad)
