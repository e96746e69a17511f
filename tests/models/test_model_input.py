"""ModelInput: the input convention a user states for a model bgbias did not train."""

from __future__ import annotations

import pytest

from bgbias.data.geometry import EvalGeometry
from bgbias.errors import OptionError
from bgbias.models.input_convention import CLIP, IMAGENET, UNIT, InputConvention
from bgbias.models.model_input import ModelInput, parse_normalization


def test_the_geometry_defaults_to_the_datasets_and_keeps_its_proportion():
    assert ModelInput().geometry("cub") == EvalGeometry(256, 227)
    assert ModelInput().geometry("bench") == EvalGeometry(128, 128)
    assert ModelInput(input_size=224).geometry("cub") == EvalGeometry(253, 224)  # 224 · 256 / 227 = 252.6
    assert ModelInput(input_size=224).geometry("bench") == EvalGeometry(224, 224)
    assert ModelInput(input_size=224, resize=256).geometry("bench") == EvalGeometry(256, 224)
    assert ModelInput(resize=300).geometry("cub") == EvalGeometry(300, 227)


@pytest.mark.parametrize(("text", "convention"), [
    ("imagenet", IMAGENET), ("CLIP", CLIP), ("none", UNIT),
    ("0.5,0.25", InputConvention((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))),
    ("0.1,0.2,0.3,1,2,4", InputConvention((0.1, 0.2, 0.3), (1.0, 2.0, 4.0))),
])
def test_normalisations_by_name_or_numbers(text, convention):
    assert parse_normalization(text) == convention


@pytest.mark.parametrize("text", ["imagenet21k", "0.5", "0.5,0.5,0.5", "0.5,0", "0.5,nan", "a,b"])
def test_other_normalisations_are_refused_with_the_forms_that_work(text):
    with pytest.raises(OptionError) as err:
        ModelInput(normalize=text)
    assert "imagenet, clip or none" in err.value.fix


def test_sizes_must_be_positive_and_the_crop_fit_the_resize_named_as_python_names_them():
    with pytest.raises(OptionError, match="input_size=0 is invalid: it must be an integer of at") as err:
        ModelInput(input_size=0)
    assert err.value.fix == "pass input_size=224"
    with pytest.raises(OptionError, match="resize=100 is smaller than the input size 224") as err:
        ModelInput(input_size=224, resize=100)
    assert err.value.parameter == "resize"
    assert err.value.render({}).startswith("--resize 100 is smaller than the input size 224")
    with pytest.raises(OptionError, match=r"normalize=3 is invalid: it must be a string"):
        ModelInput(normalize=3)
    with pytest.raises(OptionError, match="l2_normalize='no' is invalid: it must be True or False"):
        ModelInput(l2_normalize="no")
    assert ModelInput(output_key=1).output_key == "1"  # a tuple's position, as the command line gives it


def test_the_record_names_the_numbers_and_the_line_names_the_defaults():
    record = ModelInput(normalize="clip", output_key="emb").as_dict()
    assert record["mean"] == list(CLIP.mean) and record["output_key"] == "emb" and record["l2_normalize"]
    assert "the dataset's evaluation geometry" in ModelInput().describe()
    assert "224 px centre crop" in ModelInput(input_size=224).describe()
