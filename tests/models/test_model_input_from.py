"""ModelInput from a timm model's pretrained_cfg and from a torchvision weights enum: the very pixels the
model's own preprocessing gives it, or a refusal naming the argument."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image

from bgbias.data.geometry import EvalGeometry
from bgbias.data.transforms import eval_transform
from bgbias.errors import OptionError
from bgbias.models.input_convention import IMAGENET
from bgbias.models.model_input import ModelInput, normalization_text, parse_normalization

weights = torchvision.models


def _stand_in(**cfg) -> SimpleNamespace:
    """An object with a timm-like pretrained_cfg, as timm.create_model leaves on its models."""
    return SimpleNamespace(pretrained_cfg=cfg)


def _images() -> list[Image.Image]:
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
            for w, h in [(500, 375), (333, 500), (300, 300)]]


def _bgbias_input(model_input: ModelInput, image: Image.Image) -> torch.Tensor:
    """What bgbias gives the model: the evaluation geometry, then the normalisation."""
    pixels = torch.from_numpy(eval_transform(image, model_input.geometry("bench"))).permute(2, 0, 1)
    return model_input.normalize_batch(pixels[None].float() / 255)[0]


@pytest.fixture(params=["timm", "without timm"])
def timm_or_not(request, monkeypatch):
    """From timm's own resolution where timm is installed, and from the dict alone where it is not."""
    if request.param == "timm":
        pytest.importorskip("timm")
    else:
        find_spec = importlib.util.find_spec
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "timm"
                            else find_spec(name, *a))
    return request.param


def test_a_timm_config_gives_its_size_crop_fraction_interpolation_and_statistics(timm_or_not):
    cfg = {"input_size": (3, 192, 192), "interpolation": "bilinear", "crop_pct": 0.9, "crop_mode": "center",
           "mean": (0.5, 0.4, 0.3), "std": (0.2, 0.25, 0.3)}
    stated = ModelInput.from_timm(_stand_in(**cfg))
    assert stated == ModelInput(input_size=192, resize=213, normalize="0.5,0.4,0.3,0.2,0.25,0.3",
                                interpolation="bilinear")  # floor(192 / 0.9) = 213, as timm's eval transform
    assert stated.geometry("cub") == EvalGeometry(213, 192, "bilinear")
    # timm's defaults where the config is silent: 224 px, crop_pct 0.875, bicubic, ImageNet statistics
    silent = ModelInput.from_timm(_stand_in())
    assert silent == ModelInput(input_size=224, resize=256, interpolation="bicubic")


def test_overrides_replace_fields_and_a_size_alone_keeps_the_crop_fraction(timm_or_not):
    model = _stand_in(input_size=(3, 224, 224), crop_pct=0.95, mean=(0.5,) * 3, std=(0.5,) * 3)
    stated = ModelInput.from_timm(model, input_size=288, output_key="features", l2_normalize=False)
    assert (stated.input_size, stated.resize) == (288, 303)  # floor(288 / 0.95), as timm scales it
    assert (stated.normalize, stated.output_key, stated.l2_normalize) == ("0.5,0.5", "features", False)
    assert ModelInput.from_timm(model, input_size=160, resize=160).resize == 160
    with pytest.raises(OptionError, match=r"ModelInput\.from_timm got size=3, which is not a field") as err:
        ModelInput.from_timm(model, size=3)
    assert "input_size=, resize=" in err.value.fix
    with pytest.raises(OptionError, match="input_size=0 is invalid"):
        ModelInput.from_timm(model, input_size=0)


@pytest.mark.parametrize(("cfg", "problem"), [
    ({"crop_mode": "squash"}, "crop_mode='squash'; bgbias reproduces only 'center'"),
    ({"crop_mode": "border"}, "crop_mode='border'"),
    ({"input_size": (3, 224, 320)}, r"size \(3, 224, 320\) \(channels, height, width\)"),
    ({"input_size": (1, 224, 224)}, r"size \(1, 224, 224\)"),
    ({"interpolation": "nearest"}, "'nearest' interpolation; bgbias resizes with bilinear or bicubic"),
    ({"crop_pct": 1.2}, "crop_pct=1.2: its pipeline pads"),
    ({"mean": (0.5,)}, r"normalises with mean=\(0.5,\), not three"),
    ({"std": (0.5, 0.0, 0.5)}, "not three finite numbers above 0"),
])
def test_what_bgbias_cannot_reproduce_is_refused_naming_the_model(timm_or_not, cfg, problem):
    with pytest.raises(OptionError, match=problem) as err:
        ModelInput.from_timm(_stand_in(**cfg))
    assert str(err.value).startswith("model=")
    assert "bgbias.ModelInput(input_size=..., resize=..., normalize=..., interpolation=...)" in err.value.fix


def test_an_object_without_a_pretrained_cfg_is_not_a_timm_model():
    with pytest.raises(OptionError, match="model=Linear has no pretrained_cfg: it is not a timm model"):
        ModelInput.from_timm(torch.nn.Linear(2, 2))


@pytest.mark.parametrize(("member", "expected"), [
    (weights.ResNet50_Weights.IMAGENET1K_V1, ModelInput(input_size=224, resize=256)),
    (weights.ResNet50_Weights.IMAGENET1K_V2, ModelInput(input_size=224, resize=232)),
    (weights.ViT_B_16_Weights.IMAGENET1K_V1, ModelInput(input_size=224, resize=256)),
    (weights.ViT_B_16_Weights.IMAGENET1K_SWAG_E2E_V1,
     ModelInput(input_size=384, resize=384, interpolation="bicubic")),
    (weights.EfficientNet_B0_Weights.IMAGENET1K_V1,
     ModelInput(input_size=224, resize=256, interpolation="bicubic")),
])
def test_a_torchvision_weights_enum_gives_its_presets_sizes_and_statistics(member, expected):
    assert ModelInput.from_torchvision(member) == expected
    resized = ModelInput.from_torchvision(weights.ResNet50_Weights.IMAGENET1K_V2, input_size=112)
    assert (resized.input_size, resized.resize) == (112, 116)  # the preset's 232 / 224


def test_anything_but_an_image_classification_weights_member_is_refused_naming_weights():
    with pytest.raises(OptionError, match=r"weights='ResNet50_Weights\.IMAGENET1K_V2' is not a torchvision"):
        ModelInput.from_torchvision("ResNet50_Weights.IMAGENET1K_V2")
    from torchvision.models.video import R3D_18_Weights

    with pytest.raises(OptionError, match=r"weights=R3D_18_Weights\.KINETICS400_V1 come with the preset "
                                          "VideoClassification"):
        ModelInput.from_torchvision(R3D_18_Weights.KINETICS400_V1)


@pytest.mark.parametrize("member", [weights.ResNet50_Weights.IMAGENET1K_V2,
                                    weights.EfficientNet_B0_Weights.IMAGENET1K_V1])
def test_bgbias_gives_a_torchvision_model_the_pixels_of_its_own_preset(member):
    model_input, preset = ModelInput.from_torchvision(member), member.transforms()
    for image in _images():
        assert torch.equal(_bgbias_input(model_input, image), preset(image))


@pytest.mark.parametrize("name", ["resnet18", "vit_tiny_patch16_224", "test_convnext"])
def test_bgbias_gives_a_timm_model_the_pixels_of_its_own_eval_transform(name):
    timm = pytest.importorskip("timm")
    model = timm.create_model(name, pretrained=False)
    transform = timm.data.create_transform(**timm.data.resolve_model_data_config(model))
    model_input = ModelInput.from_timm(model)
    for image in _images():
        assert torch.equal(_bgbias_input(model_input, image), transform(image))


def test_normalize_batch_is_the_stated_normalisation():
    images = torch.rand(2, 3, 8, 8)
    mean, std = torch.tensor(IMAGENET.mean).view(1, 3, 1, 1), torch.tensor(IMAGENET.std).view(1, 3, 1, 1)
    assert torch.allclose(ModelInput().normalize_batch(images), (images - mean) / std)
    assert torch.equal(ModelInput(normalize="none").normalize_batch(images), images)


def test_statistics_are_named_where_a_name_has_them_and_otherwise_read_back_exactly():
    assert normalization_text(IMAGENET.mean, IMAGENET.std) == "imagenet"
    assert normalization_text((0.5,) * 3, (0.5,) * 3) == "0.5,0.5"
    odd = ((0.1 + 0.2, 1 / 3, 0.7), (0.2, 0.3, 0.4))
    convention = parse_normalization(normalization_text(*odd))
    assert (convention.mean, convention.std) == odd


def test_the_interpolation_is_recorded_only_where_it_is_not_the_default():
    assert "interpolation" not in ModelInput(input_size=224).as_dict()  # fingerprints and homes of before
    bicubic = ModelInput(input_size=224, interpolation="bicubic")
    assert bicubic.as_dict()["interpolation"] == "bicubic"
    assert bicubic.geometry("cub") == EvalGeometry(253, 224, "bicubic")
    assert "(bicubic)" in bicubic.describe() and "bicubic" not in ModelInput(input_size=224).describe()
    with pytest.raises(OptionError, match="interpolation='nearest' is invalid: it must be one of bilinear"):
        ModelInput(interpolation="nearest")
