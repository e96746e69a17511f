"""The precision (``--amp``, ``amp=``) and memory format (``--memory-format``, ``memory_format=``) a model is
scored and explained in: a run's own by default, bf16 autocast and channels-last for an outside torch model,
float32 for ONNX; what the embedding cache, the fingerprint, the home and the records make of them."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
import torch
from click.testing import CliRunner

import bgbias
from bgbias.attribution.run import explain
from bgbias.cli import main
from bgbias.engine import device as device_module
from bgbias.engine.external_model import MODEL_RECORD, external_model, load_external_model
from bgbias.engine.model_spec import network_from_callable
from bgbias.engine.trained import load_trained
from bgbias.errors import ModelError, OptionError
from bgbias.host_memory import keep_freed_memory
from bgbias.measurement.request import MeasureRequest
from bgbias.models.model_input import ModelInput
from tests.engine.external import export_onnx, export_torchscript, exported_run, tiny_embedder

CPU = torch.device("cpu")
CHANNELS_LAST = torch.channels_last
FACTORY = "tests.engine.external:tiny_embedder"


@pytest.fixture
def native_bf16(monkeypatch):
    """A CPU that computes bfloat16 natively, whatever this machine's: ``amp: bf16`` runs there."""
    monkeypatch.setattr(device_module, "cpu_has_native_bf16", lambda: True)


def _conv_weights_are(module: torch.nn.Module, layout: torch.memory_format) -> bool:
    weights = [tensor for tensor in module.state_dict().values() if tensor.ndim == 4]
    return bool(weights) and all(tensor.is_contiguous(memory_format=layout) for tensor in weights)


def _data_args(bench):
    return ["--dataset", "bench", "--root", str(bench / "bench"), "--masks", str(bench / "masks"),
            "--device", "cpu", "--no-progress"]


def _request(bench, **options):
    return MeasureRequest(dataset="bench", root=bench / "bench", masks=bench / "masks", workers=0,
                          progress=False, **options)


def test_a_run_keeps_its_own_precision_and_layout_unless_told_otherwise(tiny_run, native_bf16):
    own = load_trained(tiny_run, device="cpu")
    assert own.amp is None and own.memory_format == CHANNELS_LAST  # its config: auto (a CPU: float32), CL
    assert _conv_weights_are(own.method, CHANNELS_LAST)
    told = load_trained(tiny_run, device="cpu", amp="bf16", memory_format="contiguous")
    assert told.amp == torch.bfloat16 and told.memory_format == torch.contiguous_format
    assert _conv_weights_are(told.method, torch.contiguous_format)
    assert told.fingerprint() != own.fingerprint()  # the layout changes the last bits: another cache key


def test_bf16_asked_of_a_cpu_without_it_is_refused_when_the_run_is_loaded(tiny_run, monkeypatch):
    monkeypatch.setattr(device_module, "cpu_has_native_bf16", lambda: False)
    with pytest.raises(OptionError, match="native bfloat16 arithmetic") as err:
        load_trained(tiny_run, device="cpu", amp="bf16")
    assert "amp=off" in err.value.fix and "fix:  use --amp off" in err.value.render({})


def test_eval_of_a_run_embeds_and_records_the_precision_and_layout_asked_for(tiny_run, tiny_bench, tmp_path,
                                                                            native_bf16):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)

    def evaluate(*options):
        result = CliRunner().invoke(main, ["eval", "--checkpoint", str(run), *_data_args(tiny_bench),
                                           "--workers", "0", *options])
        assert result.exit_code == 0, result.output
        (report,) = run.glob("eval/*-test/report.json")
        return result.output, json.loads(report.read_text())["compute"]

    output, compute = evaluate()
    assert "clean: embedded" in output
    assert compute == {"device": "cpu", "precision": "float32", "memory_format": "channels_last",
                       "loader_workers": 0, "host_memory": keep_freed_memory()}
    output, compute = evaluate("--amp", "bf16")
    assert "clean: embedded" in output  # a float32 state never stands for a bf16 one
    assert (compute["precision"], compute["memory_format"]) == ("bfloat16", "channels_last")
    output, compute = evaluate("--amp", "bf16", "--memory-format", "contiguous")
    assert "clean: embedded" in output
    assert (compute["precision"], compute["memory_format"]) == ("bfloat16", "contiguous")
    output, _ = evaluate("--amp", "bf16")
    assert "clean: cached embeddings" in output


@pytest.mark.parametrize("kind", ["torchscript", "factory"])
def test_an_outside_torch_model_runs_channels_last_by_default_and_in_bf16_when_asked(kind, tiny_run, tmp_path,
                                                                                      native_bf16):
    spec = str(export_torchscript(tiny_run, tmp_path / "run.pt")) if kind == "torchscript" else FACTORY
    assert load_external_model(spec, ModelInput(), device="cpu", out=tmp_path / "auto").amp is None
    model = load_external_model(spec, ModelInput(), device="cpu", amp="bf16", out=tmp_path / "bf16")
    assert model.amp == torch.bfloat16 and model.memory_format == CHANNELS_LAST
    assert _conv_weights_are(model.network.call, CHANNELS_LAST)  # converted once, when loaded
    seen = []
    model.network = dataclasses.replace(model.network, call=_recording(model.network.call, seen))
    model.embed(torch.rand(2, 3, 32, 32))
    assert seen == [True]  # and its input, in every embed
    off = load_external_model(spec, ModelInput(), device="cpu", amp="off", memory_format="contiguous",
                              out=tmp_path / "off")
    assert off.amp is None and off.memory_format == torch.contiguous_format
    assert _conv_weights_are(off.network.call, torch.contiguous_format)


def _recording(call, seen):
    def recorded(inputs):
        seen.append(inputs.is_contiguous(memory_format=CHANNELS_LAST) and not inputs.is_contiguous())
        return call(inputs)
    return recorded


def test_auto_leaves_an_outside_model_in_float32_on_a_cpu_without_native_bf16(monkeypatch, tmp_path):
    monkeypatch.setattr(device_module, "cpu_has_native_bf16", lambda: False)
    model = load_external_model(FACTORY, ModelInput(), device="cpu", out=tmp_path / "home")
    assert model.amp is None and model.memory_format == CHANNELS_LAST


def test_a_plain_function_gets_its_input_as_it_is_unless_channels_last_is_asked_for(tmp_path, native_bf16):
    module, seen = tiny_embedder().eval(), []
    network = network_from_callable(_recording(module, seen), "function", fingerprint="v1")
    plain = external_model(network, ModelInput(), CPU, tmp_path / "a")
    assert plain.amp is None and plain.memory_format == torch.contiguous_format
    plain.embed(torch.rand(2, 3, 32, 32))
    asked = external_model(network, ModelInput(), CPU, tmp_path / "b", memory_format="channels_last")
    asked.embed(torch.rand(2, 3, 32, 32))
    assert seen == [False, True]
    assert _conv_weights_are(module, torch.contiguous_format)  # its weights are the function's business


def test_an_onnx_model_runs_in_float32_and_refuses_another_precision_or_layout(tiny_run, tmp_path,
                                                                             native_bf16):
    path = str(export_onnx(exported_run(tiny_run), tmp_path / "run.onnx"))
    model = load_external_model(path, ModelInput(), device="cpu", out=tmp_path / "default")
    assert model.amp is None and model.memory_format == torch.contiguous_format
    said = load_external_model(path, ModelInput(), device="cpu", amp="off", memory_format="contiguous",
                               out=tmp_path / "default")
    assert said.fingerprint() == model.fingerprint()
    for option, value in [("amp", "bf16"), ("amp", "auto"), ("memory_format", "channels_last")]:
        with pytest.raises(OptionError, match=f"{option}={value} .*ONNX model") as err:
            load_external_model(path, ModelInput(), device="cpu", out=tmp_path / "refused", **{option: value})
        assert "TorchScript export or a factory" in err.value.fix
    refused = CliRunner().invoke(main, ["eval", "--model", path, "--amp", "bf16", "--dataset", "bench",
                                        "--out", str(tmp_path / "cli")])
    assert refused.exit_code == 2 and "--amp bf16 does not apply" in refused.output


def test_precision_and_layout_change_the_fingerprint_and_the_default_home(tmp_path, monkeypatch, native_bf16):
    monkeypatch.chdir(tmp_path)

    def load(**compute):
        return load_external_model(FACTORY, ModelInput(), device="cpu", **compute)

    bf16, default = load(amp="bf16"), load()
    plain = load(amp="off", memory_format="contiguous")
    assert len({bf16.fingerprint(), default.fingerprint(), plain.fingerprint()}) == 3
    assert bf16.home.name.endswith("-bfloat16-channels_last")
    assert default.home.name.endswith("-channels_last") and "bfloat16" not in default.home.name
    # float32 and contiguous: the name and fingerprint a model had before either was chosen
    assert plain.home.name.count("-") == 2
    bf16.claim_home()
    record = json.loads((bf16.home / MODEL_RECORD).read_text())
    assert record["fingerprint"] == bf16.fingerprint()
    assert (record["precision"], record["memory_format"]) == ("bfloat16", "channels_last")
    # A home holds one model's reports: the float32 model is refused in the bf16 one's.
    with pytest.raises(ModelError, match="another input convention, precision or memory format"):
        load_external_model(FACTORY, ModelInput(), device="cpu", amp="off", out=bf16.home)


def test_the_cache_of_an_outside_model_is_keyed_by_its_precision(tiny_bench, tmp_path, monkeypatch,
                                                                 native_bf16):
    monkeypatch.chdir(tmp_path)
    first = bgbias.evaluate(FACTORY, "bench", root=tiny_bench / "bench", corrupted=False, workers=0,
                            out="f32")
    assert first.embedded == 1 and first.report.model["kind"] == "factory"
    again = bgbias.evaluate(FACTORY, "bench", root=tiny_bench / "bench", corrupted=False, workers=0,
                            out="f32")
    assert again.embedded == 0 and again.out_dir == first.out_dir
    bf16 = bgbias.evaluate(FACTORY, "bench", root=tiny_bench / "bench", corrupted=False, workers=0,
                           amp="bf16", out="bf16")
    assert bf16.embedded == 1 and bf16.out_dir != first.out_dir
    meta = [json.loads((result.out_dir / "report.json").read_text())["compute"] for result in (first, bf16)]
    assert [(m["precision"], m["memory_format"]) for m in meta] == [("float32", "channels_last"),
                                                                    ("bfloat16", "channels_last")]


def test_the_api_checks_the_two_arguments(tiny_run, tmp_path):
    with pytest.raises(OptionError, match="amp='bf32' is invalid: it must be one of auto, off, bf16, fp16"):
        bgbias.evaluate(FACTORY, "bench", amp="bf32")
    with pytest.raises(OptionError, match="memory_format='nhwc' is invalid"):
        bgbias.evaluate(FACTORY, "bench", memory_format="nhwc")
    with pytest.raises(OptionError, match="amp='off' given with an embedding model") as err:
        bgbias.evaluate(load_trained(tiny_run, device="cpu"), "bench", amp="off", out=tmp_path / "x")
    assert "load_trained(run, amp=" in err.value.fix


def test_explanations_record_float32_maps_in_the_models_layout(tiny_run, tiny_bench, tmp_path, native_bf16):
    request = _request(tiny_bench, limit=1, gallery_count=0, attribution_options={"copies": 2})
    outside = load_external_model(FACTORY, ModelInput(input_size=32), device="cpu", amp="bf16",
                                  out=tmp_path / "home")
    assert outside.amp == torch.bfloat16
    summary = explain(outside, request, log=lambda _line: None).summary
    assert summary["compute"] == {"device": "cpu", "precision": "float32", "memory_format": "channels_last"}
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    result = CliRunner().invoke(main, ["explain", "--checkpoint", str(run), "--memory-format", "contiguous",
                                       "--limit", "1", "--gallery", "0", "--attribution-option", "copies=2",
                                       *_data_args(tiny_bench)])
    assert result.exit_code == 0, result.output
    (summary_path,) = run.glob("explain/*/summary.json")
    assert json.loads(summary_path.read_text())["compute"]["memory_format"] == "contiguous"
