"""BN-Inception: the shapes of the standard network, and loading pretrainedmodels' weight file by name."""

from __future__ import annotations

import urllib.error

import pytest
import torch

from bgbias.errors import AssetError, OptionError
from bgbias.models import bninception as bn
from bgbias.models import weights as weight_files
from bgbias.models.registry import build_backbone
from tests.models.conftest import random_backbone

# A few tensors of pretrainedmodels' BNInception as its source declares them, and its size:
# 69 conv units (3 in the stem, 7 in each of 8 ordinary blocks, 5 in each of 2 reduction blocks),
# each a conv (weight, bias) and a BatchNorm (weight, bias, running_mean, running_var).
KNOWN_SHAPES = {
    "conv1_7x7_s2.weight": (64, 3, 7, 7),
    "conv1_7x7_s2_bn.running_var": (64,),
    "conv2_3x3.weight": (192, 64, 3, 3),
    "inception_3a_1x1.bias": (64,),
    "inception_3a_pool_proj.weight": (32, 192, 1, 1),
    "inception_3c_3x3.weight": (160, 128, 3, 3),
    "inception_4e_double_3x3_2_bn.weight": (256,),
    "inception_5a_1x1.weight": (352, 1056, 1, 1),
    "inception_5b_pool_proj.weight": (128, 1024, 1, 1),
}
UNITS = 69


def to_pretrainedmodels_layout(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our keys -> pretrainedmodels' keys, written independently of the loader: the prefix goes, stage and
    unit are joined by '_', '.bn' becomes '_bn', '.conv' disappears. Old files lack num_batches_tracked."""
    layout = {}
    for key, tensor in state.items():
        if key.endswith("num_batches_tracked"):
            continue
        name = key.removeprefix("blocks.").removeprefix("stem.")
        name = name.replace(".conv.", ".").replace(".bn.", "_bn.")
        stage_and_unit, tensor_name = name.rsplit(".", 1)
        layout[stage_and_unit.replace(".", "_") + "." + tensor_name] = tensor.clone()
    return layout


def randomised_source() -> bn.Backbone:
    """A BN-Inception whose BatchNorm statistics are not the defaults, so a lost tensor would show."""
    torch.manual_seed(3)
    source = random_backbone("bninception")
    for key, tensor in source.state_dict().items():
        if key.endswith("running_mean"):
            tensor.normal_(0, 0.1)
        elif key.endswith("running_var"):
            tensor.uniform_(0.5, 1.5)
    return source.eval()


@pytest.fixture
def weight_file(tmp_path):
    """A file in pretrainedmodels' layout (legacy format, with the ImageNet classifier) and its source."""
    source = randomised_source()
    layout = to_pretrainedmodels_layout(source.state_dict())
    layout["last_linear.weight"] = torch.randn(1000, 1024)
    layout["last_linear.bias"] = torch.randn(1000)
    path = tmp_path / bn.FILENAME
    torch.save(layout, path, _use_new_zipfile_serialization=False)
    return path, source, layout


def test_standard_shapes_at_224():
    backbone = random_backbone("bninception").eval()
    with torch.no_grad():
        out = backbone(torch.rand(1, 3, 224, 224), taps=backbone.levels)
    assert tuple(out["inception_5b"].shape) == (1, 1024, 7, 7)
    assert tuple(out["inception_3c"].shape) == (1, 576, 14, 14)
    assert tuple(out["inception_4e"].shape) == (1, 1056, 7, 7)
    assert backbone.levels == ("inception_3c", "inception_4e", "inception_5b")
    assert [backbone.channels[level] for level in backbone.levels] == [576, 1056, 1024]
    assert backbone.final == "inception_5b"


def test_the_layout_matches_pretrainedmodels():
    layout = to_pretrainedmodels_layout(random_backbone("bninception").state_dict())
    assert len(layout) == UNITS * 6
    for key, shape in KNOWN_SHAPES.items():
        assert tuple(layout[key].shape) == shape, key
    ours = random_backbone("bninception").state_dict()
    assert {bn.pretrainedmodels_key(key) for key in ours} >= set(layout)


@pytest.mark.slow
def test_pretrainedmodels_file_round_trip(weight_file):
    path, source, _ = weight_file
    loaded = build_backbone("bninception", weights=path).eval()
    expected = source.state_dict()
    for key, tensor in loaded.state_dict().items():
        if not key.endswith("num_batches_tracked"):
            assert torch.equal(tensor, expected[key]), key
    images = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(loaded(images)["inception_5b"], source(images)["inception_5b"])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "named"),
    [
        (
            lambda layout: layout.pop("inception_4a_3x3_bn.running_mean"),
            r"lacks 'inception_4a_3x3_bn\.running_mean'",
        ),
        (
            lambda layout: layout.update({"inception_5b_1x1.weight": torch.zeros(352, 1024, 3, 3)}),
            r"'inception_5b_1x1\.weight' in the weight file has shape \(352, 1024, 3, 3\)",
        ),
        (
            lambda layout: layout.update({"inception_6a_1x1.weight": torch.zeros(1)}),
            r"holds 'inception_6a_1x1\.weight'",
        ),
    ],
    ids=["missing", "misshapen", "unexpected"],
)
def test_a_file_that_does_not_fit_names_the_bad_key(weight_file, change, named):
    path, _, layout = weight_file
    change(layout)
    torch.save(layout, path)
    with pytest.raises(AssetError, match=named) as caught:
        build_backbone("bninception", weights=path)
    assert caught.value.path == str(path)
    assert bn.URL in caught.value.fix


def test_an_unreadable_file_is_an_asset_error(tmp_path):
    path = tmp_path / "broken.pth"
    path.write_bytes(b"not a pickle")
    with pytest.raises(AssetError, match="cannot read the weight file"):
        build_backbone("bninception", weights=path)
    with pytest.raises(AssetError, match="weight file not found"):
        build_backbone("bninception", weights=tmp_path / "absent.pth")


def refuse_download(url, dest):
    raise urllib.error.URLError("no network in tests")


def test_no_file_and_no_network_is_an_asset_error_naming_the_url(tmp_path, monkeypatch):
    monkeypatch.setattr(weight_files, "download_file", refuse_download)
    with pytest.raises(AssetError, match="no ImageNet weights for BN-Inception") as caught:
        build_backbone("bninception", home=tmp_path)
    assert bn.URL in caught.value.fix
    assert "--weights PATH" in caught.value.fix
    assert caught.value.path == str(tmp_path / "weights" / bn.FILENAME)


@pytest.mark.slow
def test_the_file_in_home_is_used_without_downloading(tmp_path, monkeypatch, weight_file):
    path, source, _ = weight_file
    cached = tmp_path / "home" / "weights" / bn.FILENAME
    cached.parent.mkdir(parents=True)
    cached.write_bytes(path.read_bytes())
    monkeypatch.setattr(weight_files, "download_file", refuse_download)
    loaded = build_backbone("bninception", home=tmp_path / "home")
    key = "blocks.inception_4d.double_3x3_1.bn.running_var"
    assert torch.equal(loaded.state_dict()[key], source.state_dict()[key])


@pytest.mark.slow
def test_a_missing_file_is_downloaded_into_home(tmp_path, monkeypatch, weight_file):
    path, source, _ = weight_file
    requested = []

    def fake_download(url, dest):
        requested.append((url, dest))
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(path.read_bytes())
        return dest

    monkeypatch.setattr(weight_files, "download_file", fake_download)
    loaded = build_backbone("bninception", home=tmp_path / "home")
    assert requested == [(bn.URL, tmp_path / "home" / "weights" / bn.FILENAME)]
    key = "blocks.stem.conv1_7x7_s2.conv.weight"
    assert torch.equal(loaded.state_dict()[key], source.state_dict()[key])


def test_an_input_size_the_network_cannot_split_is_an_option_error():
    backbone = random_backbone("bninception").eval()
    with pytest.raises(OptionError, match="cannot take this input size") as caught, torch.no_grad():
        backbone(torch.rand(1, 3, 200, 200))
    assert "multiple of 32" in caught.value.fix
