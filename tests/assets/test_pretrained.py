"""Offline MobileNetV2 weights: order mapping, shape checks, and the fallbacks when the asset is missing."""

from __future__ import annotations

import pytest

from bgbias.assets.catalog import CATALOG
from bgbias.errors import AssetError
from bgbias.models import pretrained

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def mobilenet():
    from bgbias.compat import import_torchvision

    return import_torchvision().models.mobilenet_v2


def _old_layout(model, seed=0):
    """The model's feature tensors under other names, in the same order, with random values."""
    generator = torch.Generator().manual_seed(seed)
    old = {}
    for index, (key, tensor) in enumerate(model.state_dict().items()):
        if key.startswith("features."):
            value = (
                torch.randn(tensor.shape, generator=generator) if tensor.is_floating_point() else tensor + 7
            )
            old[f"old.block{index}.{key.rsplit('.', 1)[-1]}"] = value
    return old


def test_map_features_by_order_renames_in_order(mobilenet):
    model = mobilenet(weights=None)
    old = _old_layout(model)
    mapped = pretrained.map_features_by_order(old, model.state_dict())
    feature_keys = [k for k in model.state_dict() if k.startswith("features.")]
    assert list(mapped) == feature_keys and len(mapped) == 312
    assert all(mapped[new] is tensor for new, tensor in zip(feature_keys, old.values(), strict=True))


def test_shape_mismatch_raises_naming_both_keys(mobilenet):
    model = mobilenet(weights=None)
    old = _old_layout(model)
    key = list(old)[10]
    old[key] = torch.zeros(3, 3)
    with pytest.raises(AssetError) as info:
        pretrained.map_features_by_order(old, model.state_dict(), path="w.pt")
    assert key in info.value.problem and "features." in info.value.problem
    assert info.value.path == "w.pt"


def test_kind_or_count_mismatch_raises(mobilenet):
    model = mobilenet(weights=None)
    old = _old_layout(model)
    items = list(old.items())
    swapped = dict([items[0], (items[2][0], items[1][1]), (items[1][0], items[2][1]), *items[3:]])
    with pytest.raises(AssetError, match="do not fit"):  # a weight where a bias belongs
        pretrained.map_features_by_order(swapped, model.state_dict())
    with pytest.raises(AssetError, match="311 tensors"):
        pretrained.map_features_by_order(dict(items[:-1]), model.state_dict())


def test_load_old_layout_file(mobilenet, tmp_path):
    model = mobilenet(weights=None)
    old = _old_layout(model, seed=3)
    torch.save(old, tmp_path / "w.pt")
    classifier = model.classifier[1].weight.clone()
    pretrained.load_old_layout_features(model, tmp_path / "w.pt")
    assert torch.equal(model.features[0][0].weight, next(iter(old.values())))
    assert torch.equal(model.features[18][1].running_var, list(old.values())[-2])
    assert torch.equal(model.classifier[1].weight, classifier)


def test_damaged_file_is_an_asset_error(mobilenet, tmp_path):
    (tmp_path / "w.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(AssetError) as info:
        pretrained.load_old_layout_features(mobilenet(weights=None), tmp_path / "w.pt")
    assert "bgbias assets fetch mobilenet_v2" in info.value.fix


def test_installed_asset_with_wrong_bytes_is_refused(mobilenet, tmp_path):
    member = CATALOG["mobilenet_v2"].members[0]
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / member.target).write_bytes(b"\0" * member.size)
    with pytest.raises(AssetError) as info:
        pretrained.load_mobilenet_v2_imagenet(mobilenet(weights=None), home=tmp_path)
    assert "checksum mismatch" in info.value.problem and member.sha256 in info.value.problem


def test_missing_asset_falls_back_to_torchvision(mobilenet, tmp_path, monkeypatch):
    reference = mobilenet(weights=None)
    monkeypatch.setattr(pretrained, "download_torchvision_state", lambda: reference.state_dict())
    model = pretrained.load_mobilenet_v2_imagenet(mobilenet(weights=None), home=tmp_path)
    assert torch.equal(model.features[3].conv[1][0].weight, reference.features[3].conv[1][0].weight)


def test_missing_asset_and_no_internet_is_an_asset_error(mobilenet, tmp_path, monkeypatch):
    def offline():
        raise OSError("Temporary failure in name resolution")

    monkeypatch.setattr(pretrained, "download_torchvision_state", offline)
    with pytest.raises(AssetError) as info:
        pretrained.load_mobilenet_v2_imagenet(mobilenet(weights=None), home=tmp_path)
    assert "name resolution" in info.value.problem
    assert "bgbias assets fetch mobilenet_v2" in info.value.fix


def test_the_imagenet_factory_gives_pooled_features_with_the_asset_weights(mobilenet, tmp_path, monkeypatch):
    reference = mobilenet(weights=None)
    monkeypatch.setattr(pretrained, "download_torchvision_state", lambda: reference.state_dict())
    model = pretrained.imagenet_mobilenet_v2(home=str(tmp_path))
    assert torch.equal(model.features[3].conv[1][0].weight, reference.features[3].conv[1][0].weight)
    assert model.eval()(torch.rand(2, 3, 64, 64)).shape == (2, 1280)
