"""Offline MobileNetV2 weights: order mapping, shape checks, and the fallbacks when the asset is missing."""

from __future__ import annotations

import pytest

from bgbias.assets.catalog import CATALOG
from bgbias.errors import AssetError
from bgbias.models import pretrained

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def mobilenet():
    import torchvision

    return torchvision.models.mobilenet_v2


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


def _lite0_file(tmp_path, seed=0):
    """A generated file in the layout of the real asset (random values, variances positive, so no download
    is needed)."""
    from bgbias.models.efficientnet_lite import EfficientNetLite0, reference_key

    generator = torch.Generator().manual_seed(seed)
    state = {}
    for key, tensor in EfficientNetLite0().state_dict().items():
        value = torch.rand(tensor.shape, generator=generator) + 0.5 if tensor.is_floating_point() else tensor
        state[reference_key(key)] = value
    path = tmp_path / "lite0.pth"
    torch.save(state, path)
    return path, state


@pytest.fixture
def generated_lite0_asset(tmp_path, monkeypatch):
    """The Lite0 asset seen as installed, holding a generated file; the reference-layout state it holds."""
    path, state = _lite0_file(tmp_path)
    monkeypatch.setattr(pretrained, "asset_dir", lambda name, home=None: tmp_path)
    monkeypatch.setattr(pretrained, "_verified_file", lambda asset, root: path)
    return state


def test_the_lite0_factory_gives_pooled_features_of_the_asset_weights(generated_lite0_asset):
    model = pretrained.imagenet_efficientnet_lite0().eval()
    network = model.network
    assert isinstance(network.classifier, torch.nn.Identity)
    given = generated_lite0_asset["_blocks.5._depthwise_conv.weight"]
    assert torch.equal(network.blocks[5].depthwise.conv.weight, given)
    assert model(torch.rand(2, 3, 48, 48)).shape == (2, 1280)


def test_the_lite0_asset_missing_is_an_asset_error_with_the_fetch_command(tmp_path):
    with pytest.raises(AssetError) as info:
        pretrained.imagenet_efficientnet_lite0(home=str(tmp_path))
    assert "no ImageNet weights for EfficientNet-Lite0" in info.value.problem
    assert "bgbias assets fetch efficientnet_lite0" in info.value.fix


def test_an_installed_lite0_file_with_wrong_bytes_is_refused(tmp_path):
    member = CATALOG["efficientnet_lite0"].members[0]
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / member.target).write_bytes(b"\0" * member.size)
    with pytest.raises(AssetError) as info:
        pretrained.load_efficientnet_lite0_imagenet(home=tmp_path)
    assert "checksum mismatch" in info.value.problem and member.sha256 in info.value.problem
    assert "bgbias assets fetch efficientnet_lite0 --force" in info.value.fix


def test_the_random_control_is_one_model_and_leaves_the_callers_random_state_alone():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    first, second = pretrained.random_mobilenet_v2(), pretrained.random_mobilenet_v2()
    assert torch.equal(torch.get_rng_state(), before)
    assert first.state_dict().keys() == second.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), second.state_dict().values(),
                                                 strict=True))
    other = pretrained.random_mobilenet_v2(seed=1)
    assert not torch.equal(other.features[0][0].weight, first.features[0][0].weight)
    assert isinstance(first.classifier, torch.nn.Identity)
    assert first.eval()(torch.rand(2, 3, 32, 32)).shape == (2, 1280)


@pytest.mark.slow
@pytest.mark.parametrize("factory", ["random_mobilenet_v2", "imagenet_efficientnet_lite0"])
def test_the_factories_are_scored_by_bgbias_eval_model(factory, generated_lite0_asset, tiny_bench, tmp_path):
    """What `bgbias eval --model bgbias.models.pretrained:<factory>` needs: an importable factory giving
    finite (B, 1280) embeddings of the default input, pinned by the same digest on every load."""
    from click.testing import CliRunner

    from bgbias.cli import main
    from bgbias.engine.external_model import load_external_model
    from bgbias.models.model_input import ModelInput

    spec = f"bgbias.models.pretrained:{factory}"
    loads = [load_external_model(spec, ModelInput(), device="cpu", out=tmp_path / name) for name in "ab"]
    embeddings = loads[0].embed(torch.rand(3, 3, 40, 40))
    assert embeddings.shape == (3, 1280) and torch.isfinite(embeddings).all()
    assert loads[0].fingerprint() == loads[1].fingerprint()
    result = CliRunner().invoke(main, [
        "eval", "--model", spec, "--dataset", "bench", "--root", str(tiny_bench / "bench"), "--masks",
        str(tiny_bench / "masks"), "--device", "cpu", "--workers", "0", "--no-progress", "--out",
        str(tmp_path / "home")])
    assert result.exit_code == 0, result.output
    assert f"factory {spec}" in result.output and "clean MAP@R" in result.output
