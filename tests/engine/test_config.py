"""The configuration layers: protocol, method file, config file, options, --set; and their validation."""

from __future__ import annotations

import json

import pytest

from bgbias.engine.config import (
    PATH_KEYS,
    TrainConfig,
    config_from_dict,
    config_json_schema,
    load_run_config,
    parse_override,
    resolve_config,
)
from bgbias.errors import OptionError
from bgbias.methods.registry import method_names


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
        ("optim.name=lamb", "one of: adam"),
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


@pytest.mark.parametrize(
    ("override", "key", "expected"),
    [
        ("optim=3", "optim", "optim must be an object"),
        ("model=[1, 2]", "model", "model must be an object"),
        ("loss=3", "loss", "loss must be an object"),
        ("seed.x=1", "seed", "seed must be an integer"),
        ("model.backbone.name=resnet50", "model.backbone", "model.backbone must be a string"),
        ("optim.lr_head=fast", "optim.lr_head", "a finite number"),
    ],
)
def test_a_value_of_the_wrong_type_names_key_source_and_type(override, key, expected):
    with pytest.raises(OptionError) as err:
        resolve_config("triplet", "bench", overrides=[override])
    assert err.value.problem.startswith("--set: ") and f" {key} " in err.value.problem
    assert expected in err.value.render()


@pytest.mark.parametrize(
    ("content", "key", "expected"),
    [({"model": 5}, "model", "an object"), ({"data": [1]}, "data", "an object"),
     ({"optim": {"lr_head": {"x": 1}}}, "optim.lr_head", "a finite number"),
     ({"schedule": {"epochs": "8"}}, "schedule.epochs", "an integer")],
)
def test_a_config_file_of_the_wrong_shape_is_named(tmp_path, content, key, expected):
    file = tmp_path / "c.json"
    file.write_text(json.dumps(content))
    with pytest.raises(OptionError) as err:
        resolve_config("triplet", "bench", config_file=file)
    assert err.value.path == str(file) and "--config" in err.value.problem and key in err.value.problem
    assert expected in err.value.render()


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("optim.lr_backbone=0", "positive"),
        ("optim.lr_head=-0.001", "positive"),
        ("optim.lr_loss=-1", "positive"),
        ("optim.weight_decay=-0.0001", "0 or more"),
        ("optim.momentum=1.5", "in [0, 1]"),
        ("optim.momentum=-0.1", "in [0, 1]"),
        ("optim.grad_clip=0", "positive"),
        ("optim.warmup_epochs=-1", "0 or more"),
        ("optim.lr_head=Infinity", "finite"),
        ("optim.lr_head=-Infinity", "finite"),
        ("optim.lr_head=NaN", "finite"),
        ("data.crop_scale=[0.8, 0.5]", "0 < low <= high <= 1"),
        ("data.crop_scale=[0, 1]", "0 < low <= high <= 1"),
        ("data.crop_scale=[0.5, 1.5]", "0 < low <= high <= 1"),
        ("data.crop_scale=[0.5, NaN]", "data.crop_scale[1] must be a finite number"),
        ("data.resize=0", "at least 1"),
        ("data.crop=-32", "at least 1"),
        ("data.workers=-1", "0 or more"),
        ("data.workers=many", "0 or more, or auto (sized"),
        ("data.batch_size=30", "multiple of data.m_per_class"),
        ("schedule.patience=0", "at least 1"),
        ("schedule.epochs=0", "at least 1"),
        ("model.embedding_dim=0", "at least 1"),
        ("model.backbone=resnet5", "mobilenet_v2"),
        ("seed=-1", "[0, 2**64)"),
        ("fold=4", "0, 1, 2 or 3"),
        ("device=gpu", "cuda:N"),
        ('root=""', "a path"),
    ],
)
def test_every_setting_has_a_rule(override, words):
    with pytest.raises(OptionError) as err:
        resolve_config("triplet", "bench", overrides=[override])
    assert words in err.value.render()


def test_non_finite_numbers_in_a_config_file_are_refused(tmp_path):
    file = tmp_path / "c.json"
    file.write_text(json.dumps({"bgaugment": {"p": float("nan")}}))  # Python writes (and reads) NaN
    with pytest.raises(OptionError, match="finite"):
        resolve_config("triplet", "bench", config_file=file)


def test_weights_with_random_initialisation_are_refused():
    with pytest.raises(OptionError, match=r"model\.pretrained"):
        resolve_config("triplet", "bench", overrides=["model.weights=w.pth", "model.pretrained=false"])


def test_method_and_dataset_come_from_the_command_line(tmp_path):
    with pytest.raises(OptionError, match="--method"):
        resolve_config("triplet", "bench", overrides=["method=dcml"])
    file = tmp_path / "c.json"
    file.write_text(json.dumps(resolve_config("triplet", "cub").as_dict()))  # a run's config, reused
    assert resolve_config("triplet", "cub", config_file=file).dataset == "cub"
    with pytest.raises(OptionError, match="--dataset"):
        resolve_config("triplet", "bench", config_file=file)


@pytest.mark.parametrize(
    ("method", "override", "words"),
    [
        ("cosface", "loss.margin=abc", 'loss.margin = "abc"'),
        ("cosface", "loss.scale=NaN", "finite"),
        ("cosface", "loss.scale.x=1", "loss.scale must be a finite number"),
        ("cosface", "loss.margn=0.3", "use some of: margin, scale"),
        ("triplet", "loss.swap=1", "true or false"),
        ("multi_similarity", "loss.miner_epsilon=big", "loss.miner_epsilon"),
        ("dcml", "loss.env_passes=1.5", "an integer"),
        ("dcml", "loss.environments=0", "at least 1"),
        ("dcml", "loss.env_lr=0", "positive"),
        ("dcml", "loss.gamma=-0.1", "0 or more"),
        ("dcml", "loss.enviroments=2", "does not know"),
    ],
)
def test_loss_options_are_checked_while_resolving(method, override, words):
    with pytest.raises(OptionError) as err:
        resolve_config(method, "bench", overrides=[override])
    assert err.value.problem.startswith("--set: ") and words in err.value.render()


def test_loss_options_take_ints_for_floats_and_null_where_optional():
    assert resolve_config("cosface", "bench", overrides=["loss.scale=30"]).loss["scale"] == 30
    assert resolve_config("multi_similarity", "bench", overrides=["loss.miner_epsilon=null"]).loss[
        "miner_epsilon"] is None


def test_a_run_config_must_be_complete(tmp_path):
    data = resolve_config("triplet", "cub").as_dict()
    del data["dataset"], data["optim"]["lr_head"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    with pytest.raises(OptionError) as err:
        load_run_config(path)
    assert err.value.path == str(path)
    assert "dataset, optim.lr_head" in err.value.problem and "not written by bgbias train" in err.value.fix


@pytest.mark.parametrize("section, name", [("optim", "warmup_epochs"), ("model", "memory_format"),
                                           ("model", "compile"), ("schedule", "watch_test"), ("log", None)])
def test_a_run_config_lacking_a_setting_is_refused_not_filled_in_with_a_pre_release_value(tmp_path, section,
                                                                                           name):
    data = resolve_config("triplet", "cub").as_dict()
    if name is None:
        del data[section]
    else:
        del data[section][name]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    with pytest.raises(OptionError, match="missing settings") as err:
        load_run_config(path)
    assert section in err.value.problem


def test_a_run_config_is_checked_as_a_whole(tmp_path):
    data = resolve_config("cosface", "bench").as_dict()
    data["loss"]["margin"] = "wide"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    with pytest.raises(OptionError, match=r"loss\.margin") as err:
        load_run_config(path)
    assert err.value.path == str(path)


def test_paths_are_stored_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    given = {"root": "data/x", "model.weights": "w.pth", "bgaugment.masks": "m",
             "bgaugment.backgrounds": "../b"}
    assert set(given) == set(PATH_KEYS)
    config = resolve_config("triplet", "bench", overrides=[f"{key}={value}" for key, value in given.items()])
    stored = config.as_dict()
    assert stored["root"] == str(tmp_path / "data" / "x")
    assert stored["model"]["weights"] == str(tmp_path / "w.pth")
    assert stored["bgaugment"] == {**stored["bgaugment"], "masks": str(tmp_path / "m"),
                                   "backgrounds": str(tmp_path.parent / "b")}
    unset = resolve_config("triplet", "bench")
    assert (unset.root, unset.model.weights, unset.bgaugment.masks) == (None, None, None)


def test_an_option_of_several_types_takes_each_of_them():
    """The triplet loss samples "all" triplets per anchor by default, or a count of them."""
    for value in ("all", 5):
        assert resolve_config("triplet", "bench", overrides=[f"loss.triplets_per_anchor={value}"]
                              ).loss["triplets_per_anchor"] == value
    with pytest.raises(OptionError, match="triplets_per_anchor"):
        resolve_config("triplet", "bench", overrides=["loss.triplets_per_anchor=1.5"])


@pytest.mark.slow
@pytest.mark.parametrize("name", method_names())
def test_a_run_config_validates_against_the_json_schema(name):
    """Editors read the schema (``bgbias methods --schema``): a run's config.json is valid under its method's
    schema and under the one of every method, and a value the configuration refuses is refused there too."""
    jsonschema = pytest.importorskip("jsonschema")
    data = resolve_config(name, "cub", overrides=["data.crop_scale=[0.5, 1.0]"]).as_dict()
    for schema in (config_json_schema(name), config_json_schema()):
        jsonschema.validate(data, schema)
        for bad in ({**data, "seed": -1}, {**data, "optim": {**data["optim"], "lr_haed": 0.1}},
                    {**data, "loss": {**data["loss"], "not_an_option": 1}}):
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(bad, schema)


def test_the_json_schema_says_what_each_setting_must_be():
    schema = config_json_schema("dcml")
    lr_head = schema["$defs"]["OptimConfig"]["properties"]["lr_head"]
    assert lr_head["description"] == "must be a positive number"
    assert schema["properties"]["loss"]["properties"]["head_norm_group"]["enum"] == ["backbone", "head"]
    assert schema["properties"]["method"]["const"] == "dcml"
