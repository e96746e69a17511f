"""The attribution registry in the method-contract layer: output-folder labels, --attribution-option parsing,
supports() and attributions that a method package registers."""

from __future__ import annotations

import re
import sys

import pytest
import torch

from bgbias.attribution.smoothgrad import SmoothGrad
from bgbias.engine.method_model import MethodModel
from bgbias.errors import OptionError
from bgbias.methods import attribution as contract
from bgbias.methods.attribution import (
    ATTRIBUTIONS,
    MAX_LABEL_LENGTH,
    attribution_label,
    build_attribution,
    describe_attributions,
    parse_attribution_options,
    parse_option_value,
    register_attribution,
)
from bgbias.methods.registry import METHOD_MODULES, METHODS, method_names
from bgbias.registry import Registry
from tests.methods.test_contract import build


@pytest.fixture
def knobs():
    """A throwaway attribution with a string, a bool and a float option, unregistered afterwards."""

    @register_attribution("test_knobs")
    class Knobs:
        """Options of every kind, for labels."""

        serves = "any model"

        def __init__(self, mode: str = "plain", flag: bool = False, level: float = 0.5):
            self.mode, self.flag, self.level = mode, flag, level

        def options(self):
            return {"mode": self.mode, "flag": self.flag, "level": self.level}

        def supports(self, model):
            return True

        def __call__(self, model, images01, generator):
            raise NotImplementedError

    yield Knobs
    ATTRIBUTIONS.unregister("test_knobs")


# ------------------------------------------------------------------------------------------------- labels
def test_smoothgrad_at_its_defaults_is_labelled_by_its_name():
    assert attribution_label("smoothgrad") == "smoothgrad"
    assert attribution_label("smoothgrad", SmoothGrad().options()) == "smoothgrad"
    assert attribution_label("smoothgrad", {"copies": 25, "noise": 0.15}) == "smoothgrad"


def test_labels_name_the_non_default_options_sorted():
    assert attribution_label("smoothgrad", {"noise": 0.3, "copies": 50}) == "smoothgrad-copies50-noise0.3"
    full = SmoothGrad(copies=50, noise=0.3).options()
    assert attribution_label("smoothgrad", full) == "smoothgrad-copies50-noise0.3"
    assert attribution_label("smoothgrad", {"noise": 1e-5}) == "smoothgrad-noise1e-05"


def test_a_whole_float_and_its_integer_give_one_label():
    assert attribution_label("smoothgrad", {"clip_percentile": 95}) == "smoothgrad-clip_percentile95"
    assert attribution_label("smoothgrad", {"clip_percentile": 95.0}) == "smoothgrad-clip_percentile95"


def test_booleans_strings_and_unsafe_or_long_values(knobs):
    assert attribution_label("test_knobs", {"flag": True, "mode": "fast"}) == "test_knobs-flagtrue-modefast"
    unsafe = attribution_label("test_knobs", {"mode": "a/b c"})
    assert re.fullmatch(r"test_knobs-[0-9a-f]{8}", unsafe)
    assert attribution_label("test_knobs", {"mode": "a/b c"}) == unsafe
    assert attribution_label("test_knobs", {"mode": "a/b d"}) != unsafe
    long_value = "x" * MAX_LABEL_LENGTH
    long = attribution_label("test_knobs", {"mode": long_value})
    assert re.fullmatch(r"test_knobs-[0-9a-f]{8}", long) and long != unsafe
    fits = "x" * (MAX_LABEL_LENGTH - len("test_knobs-mode"))
    assert attribution_label("test_knobs", {"mode": fits}) == f"test_knobs-mode{fits}"


def test_names_must_be_filename_safe():
    with pytest.raises(ValueError, match="filename-safe"):
        register_attribution("a/b")


# --------------------------------------------------------------------------------- --attribution-option
def test_option_values_are_int_then_float_then_bool_then_text():
    assert parse_option_value("50") == 50 and isinstance(parse_option_value("50"), int)
    assert parse_option_value("0.3") == 0.3 and parse_option_value("1e-3") == 0.001
    assert parse_option_value("true") is True and parse_option_value("False") is False
    assert parse_option_value("fast") == "fast"


def test_options_parse_into_the_attributions_settings():
    options = parse_attribution_options("smoothgrad", ["copies=50", "noise = 0.3", "clip_percentile=95"])
    assert options == {"copies": 50, "noise": 0.3, "clip_percentile": 95}
    assert isinstance(options["copies"], int)
    assert parse_attribution_options("smoothgrad", []) == {}


@pytest.mark.parametrize(
    ("pair", "message"),
    [("copies", "expects key=value, got 'copies'"), ("=5", "expects key=value"),
     ("sigma=0.2", "has no option 'sigma'"), ("copies=abc", 'smoothgrad.copies = "abc" is invalid'),
     ("copies=0", "smoothgrad.copies = 0 is invalid")],
)
def test_bad_options_are_option_errors_naming_the_options(pair, message):
    with pytest.raises(OptionError, match=re.escape(message)) as raised:
        parse_attribution_options("smoothgrad", [pair])
    if "invalid" not in message:
        assert raised.value.fix.endswith("copies, noise, clip_percentile, batch")


def test_descriptions_list_smoothgrad_with_its_defaults():
    rows = {name: (options, text) for name, options, text in describe_attributions()}
    options, text = rows["smoothgrad"]
    assert options == "copies=25, noise=0.15, clip_percentile=99.0, batch=50"
    assert text.startswith("The paper's attribution") and "\n" not in text


# -------------------------------------------------------------------------------------------- supports
@pytest.mark.parametrize("name", method_names())
def test_smoothgrad_supports_every_registered_method(name):
    assert SmoothGrad().supports(build(name))


def test_smoothgrad_needs_an_input_convention():
    method = build("contrastive")
    method.backbone.convention = None
    assert not SmoothGrad().supports(method)
    assert not SmoothGrad().supports(object())
    with pytest.raises(OptionError, match="attribution 'smoothgrad' cannot explain 'contrastive'") as raised:
        contract.check_supported("smoothgrad", SmoothGrad(), MethodModel(method, torch.device("cpu")))
    assert "input convention" in raised.value.fix


# ------------------------------------------------------------------------------ method packages register
def test_the_registry_imports_smoothgrad_the_method_explainers_and_every_built_in_method_module():
    assert METHODS.modules == METHOD_MODULES
    assert contract.ATTRIBUTION_MODULES == (
        "bgbias.attribution.smoothgrad", "bgbias.methods.sam.explainer", "bgbias.methods.avsl.explainer")
    assert ATTRIBUTIONS.modules[:3] == contract.ATTRIBUTION_MODULES
    assert set(ATTRIBUTIONS.modules) == {*contract.ATTRIBUTION_MODULES, *METHOD_MODULES}
    assert len(set(ATTRIBUTIONS.modules)) == len(ATTRIBUTIONS.modules)


PLUGIN = "bgbias_test_method_package"
PLUGIN_SOURCE = '''
"""A method package's module: registers the attribution that belongs to its method."""
from bgbias.methods.attribution import register_attribution


@register_attribution("package_attention")
class PackageAttention:
    """Attention of a method package."""

    serves = "its own method"

    def __init__(self, heads: int = 1):
        self.heads = heads

    def options(self):
        return {"heads": self.heads}

    def supports(self, model):
        return getattr(model, "name", None) == "package"

    def __call__(self, model, images01, generator):
        raise NotImplementedError
'''


def test_an_attribution_registered_in_a_method_module_is_found_by_name(tmp_path, monkeypatch):
    # The registry as a method package adds to it: one more built-in method module, not yet imported.
    (tmp_path / f"{PLUGIN}.py").write_text(PLUGIN_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, PLUGIN, raising=False)
    fresh = Registry("attribution method", (*ATTRIBUTIONS.modules, PLUGIN))
    monkeypatch.setattr(contract, "ATTRIBUTIONS", fresh)
    assert PLUGIN not in sys.modules
    built = build_attribution("package_attention", heads=2)
    assert built.options() == {"heads": 2} and PLUGIN in sys.modules
    assert "package_attention" in contract.ATTRIBUTIONS
    assert attribution_label("package_attention", {"heads": 2}) == "package_attention-heads2"
    with pytest.raises(OptionError, match="cannot explain 'contrastive'") as raised:
        outside = MethodModel(build("contrastive"), torch.device("cpu"))
        contract.check_supported("package_attention", built, outside)
    assert "its own method" in raised.value.fix
