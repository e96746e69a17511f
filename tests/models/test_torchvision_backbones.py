"""torchvision backbones: GoogLeNet's input convention, and where ImageNet weights come from (never the
network in tests, never silently random)."""

from __future__ import annotations

import urllib.error

import pytest
import torch
import torchvision

from bgbias.errors import AssetError
from bgbias.models import pretrained as offline
from bgbias.models import weights as weight_files
from bgbias.models.input_convention import IMAGENET
from bgbias.models.registry import build_backbone

IMAGENET_WEIGHTS = {
    "resnet50": ("ResNet50_Weights", "resnet50", {}),
    "googlenet": ("GoogLeNet_Weights", "googlenet", {"aux_logits": True, "init_weights": True}),
}


def torchvision_model(name: str, **kwargs):
    torch.manual_seed(5)
    return getattr(torchvision.models, name)(weights=None, **kwargs)


@pytest.mark.slow
def test_googlenet_equals_torchvisions_pretrained_pipeline(tmp_path):
    """torchvision feeds its GoogLeNet weights ImageNet-normalised input through transform_input; our
    convention must give the same network input from plain RGB."""
    reference = torchvision_model("googlenet", aux_logits=True, transform_input=True, init_weights=True)
    reference.eval()
    path = tmp_path / "googlenet.pth"
    torch.save(reference.state_dict(), path)
    ours = build_backbone("googlenet", weights=path).eval()

    captured = []
    reference.inception5b.register_forward_hook(lambda module, args, out: captured.append(out))
    images = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        reference(IMAGENET.apply(images))
        mine = ours(images)["inception5b"]
    torch.testing.assert_close(mine, captured[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(IMAGENET_WEIGHTS))
def test_no_file_and_no_download_is_an_asset_error_with_the_url(name, monkeypatch, tmp_path):
    def refuse(weights):
        raise urllib.error.URLError("no network in tests")

    monkeypatch.setattr(weight_files, "torchvision_state", refuse)
    with pytest.raises(AssetError, match=f"no ImageNet weights for {name}") as caught:
        build_backbone(name, home=tmp_path)
    enum_name = IMAGENET_WEIGHTS[name][0]
    url = getattr(torchvision.models, enum_name).IMAGENET1K_V1.url
    assert url in caught.value.fix
    assert "--weights PATH" in caught.value.fix


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(IMAGENET_WEIGHTS))
def test_torchvisions_download_is_loaded(name, monkeypatch):
    enum_name, builder, kwargs = IMAGENET_WEIGHTS[name]
    source = torchvision_model(builder, **kwargs)
    asked = []

    def fake_download(weights):
        asked.append(weights)
        return source.state_dict()

    monkeypatch.setattr(weight_files, "torchvision_state", fake_download)
    backbone = build_backbone(name)
    assert asked == [getattr(torchvision.models, enum_name).IMAGENET1K_V1]
    stem = backbone.blocks["stem"]
    torch.testing.assert_close(stem.conv1.state_dict(), source.conv1.state_dict(), rtol=0, atol=0)


@pytest.mark.slow
def test_a_weight_file_of_another_architecture_names_the_first_bad_key(tmp_path):
    path = tmp_path / "mobilenet.pth"
    torch.save(torchvision_model("mobilenet_v2").state_dict(), path)
    with pytest.raises(AssetError, match=r"lacks 'conv1\.weight'") as caught:
        build_backbone("resnet50", weights=path)
    assert caught.value.path == str(path)
    assert "resnet50" in caught.value.fix


def test_a_weight_file_that_is_no_state_dict_is_an_asset_error(tmp_path):
    path = tmp_path / "list.pth"
    torch.save([torch.zeros(1)], path)
    with pytest.raises(AssetError, match="not a state dict"):
        build_backbone("mobilenet_v2", weights=path)


def test_mobilenet_v2_pretrained_uses_the_offline_loader(monkeypatch, tmp_path):
    calls = []

    def fake_loader(model, *, home=None):
        calls.append(home)
        model.features[0][0].weight.data.fill_(0.25)
        return model

    monkeypatch.setattr(offline, "load_mobilenet_v2_imagenet", fake_loader)
    backbone = build_backbone("mobilenet_v2", home=tmp_path)
    assert calls == [tmp_path]
    first_conv = backbone.blocks["stride2"][0][0]
    assert torch.all(first_conv.weight == 0.25)


def test_mobilenet_v2_never_falls_back_to_random_weights(monkeypatch):
    def missing(model, *, home=None):
        raise AssetError("no ImageNet weights for MobileNetV2", fix="run `bgbias assets fetch mobilenet_v2`")

    monkeypatch.setattr(offline, "load_mobilenet_v2_imagenet", missing)
    with pytest.raises(AssetError, match="MobileNetV2"):
        build_backbone("mobilenet_v2")


@pytest.mark.slow
def test_mobilenet_v2_loads_a_torchvision_file_without_its_classifier(tmp_path, monkeypatch):
    def unexpected(model, *, home=None):
        raise AssertionError("the offline asset must not be used when a file is given")

    monkeypatch.setattr(offline, "load_mobilenet_v2_imagenet", unexpected)
    source = torchvision_model("mobilenet_v2")
    state = {key: value for key, value in source.state_dict().items() if key.startswith("features.")}
    path = tmp_path / "features.pth"
    torch.save(state, path)
    backbone = build_backbone("mobilenet_v2", weights=path)
    ours = backbone.state_dict()
    assert torch.equal(ours["blocks.final.18.0.weight"], source.features[18][0].weight)
    assert torch.equal(ours["blocks.stride16.13.conv.0.0.weight"], source.features[13].conv[0][0].weight)
