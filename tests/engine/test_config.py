"""The configuration layers: protocol, method file, config file, options, --set; and their validation."""

from __future__ import annotations

import json

import pytest

from bgbias.engine.config import (
    TrainConfig,
    config_from_dict,
    load_run_config,
    parse_override,
    resolve_config,
)
from bgbias.errors import OptionError


def test_bench_protocol_is_the_cpu_setting():
    config = resolve_config("multi_similarity", "bench")
    assert config.model.backbone == "mobilenet_v2"
    assert config.optim.name == "adam"
    assert (config.optim.lr_backbone, config.optim.lr_head) == (1e-4, 1e-3)
    assert config.loss["miner_epsilon"] == 0.1


def test_paper_protocol_and_per_dataset_loss_values():
    config = resolve_config("arcface", "cub")
    assert config.model.backbone == "bninception"
    assert config.optim.name == "rmsprop" and config.optim.lr_backbone == 1e-6
    assert config.optim.weight_decay == 1e-4 and config.optim.momentum == 0.9
    assert config.data.batches_per_epoch == 100 and config.data.m_per_class == 1
    assert config.loss["margin"] == pytest.approx(23.2259, abs=1e-4)
    assert config.optim.lr_loss == pytest.approx(0.0051384088179694)
    cars = resolve_config("contrastive", "cars")
    assert (cars.loss["pos_margin"], cars.loss["neg_margin"]) == pytest.approx((0.2652, 0.5409), abs=1e-4)
    assert cars.data.m_per_class == 4


def test_layers_override_in_order(tmp_path):
    file = tmp_path / "c.json"
    file.write_text(json.dumps({"optim": {"lr_head": 0.5, "lr_loss": 0.25}, "schedule": {"epochs": 3}}))
    config = resolve_config(
        "triplet", "bench", config_file=file, options={"schedule.epochs": 4},
        overrides=["optim.lr_loss=0.125", "loss.margin=0.3", "bgaugment.enabled=true"],
    )
    assert config.optim.lr_head == 0.5
    assert config.schedule.epochs == 4
    assert config.optim.lr_loss == 0.125
    assert config.loss["margin"] == 0.3
    assert config.bgaugment.enabled and config.monitor == "corrupted"


def test_monitor_follows_bgaugment_unless_set():
    assert resolve_config("triplet", "bench").monitor == "clean"
    overrides = ["bgaugment.enabled=true", "schedule.monitor=clean"]
    forced = resolve_config("triplet", "bench", overrides=overrides)
    assert forced.monitor == "clean"


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("optim.lr_hed=1", "did you mean 'lr_head'"),
        ("optim.name=lamb", "one of adam"),
        ("bgaugment.p=1.5", "probability"),
        ("data.batch_size=0", "at least 1"),
        ("data.batch_size=3.5", "an integer"),
        ("model.pretrained=maybe", "true or false"),
        ("nonsense", "key=value"),
    ],
)
def test_bad_settings_are_named(override, words):
    with pytest.raises(OptionError) as err:
        resolve_config("triplet", "bench", overrides=[override])
    assert words in err.value.render()


def test_bad_config_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(OptionError, match="not valid JSON"):
        resolve_config("triplet", "bench", config_file=bad)
    with pytest.raises(OptionError, match="does not exist"):
        resolve_config("triplet", "bench", config_file=tmp_path / "missing.json")


def test_parse_override_types():
    assert parse_override("a.b=3") == ("a.b", 3)
    assert parse_override("a=1e-3") == ("a", 0.001)
    assert parse_override("a=null") == ("a", None)
    assert parse_override("a=[0.5, 1]") == ("a", [0.5, 1])
    assert parse_override("a=hello") == ("a", "hello")


def test_round_trip_through_run_folder(tmp_path):
    config = resolve_config("proxy_anchor", "bench", overrides=["data.crop_scale=[0.5, 1.0]", "seed=7"])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config.as_dict()))
    assert load_run_config(path) == config
    assert config_from_dict(config.as_dict()) == config
    assert isinstance(config, TrainConfig) and config.data.crop_scale == (0.5, 1.0)
