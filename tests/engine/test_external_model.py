"""Models bgbias did not train: TorchScript, ONNX and factories scored and explained on the path every run
takes, and every way such a model can be wrong, refused with its fix."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest
import torch

from bgbias.attribution.run import explain
from bgbias.engine.external_model import MODEL_RECORD, external_model, load_external_model
from bgbias.engine.model_spec import is_factory, network_from_callable, network_from_module, parse_model_args
from bgbias.engine.trained import load_trained
from bgbias.errors import ModelError, OptionError
from bgbias.measurement.request import MeasureRequest
from bgbias.models.model_input import ModelInput
from bgbias.report.evaluate import evaluate
from tests.engine.external import export_onnx, export_torchscript, exported_run, misbehaving, tiny_embedder

AS_THE_RUN = ModelInput(normalize="none", l2_normalize=False)
"""How the exports of the tiny run want their input: RGB in [0, 1] (the method normalises inside)."""


def _request(bench, tmp_path, **options):
    settings = dict(dataset="bench", root=bench / "bench", corrupted=True, repeats=2, masks=bench / "masks",
                    backgrounds=bench / "backgrounds", workers=0, progress=False)
    return MeasureRequest(**{**settings, "manifests": tmp_path / "manifests", **options})


def _quiet(_line: str) -> None:
    pass


@pytest.fixture(scope="module")
def run_scores(tiny_run, tiny_bench, tmp_path_factory):
    """The tiny run's own evaluation (a copy of the run), and the manifests folder it made."""
    tmp = tmp_path_factory.mktemp("run-eval")
    run = tmp / "run"
    shutil.copytree(tiny_run, run)
    result = evaluate(load_trained(run, device="cpu"), _request(tiny_bench, tmp), log=_quiet)
    return result, tmp


def _same_scores(result, expected, tolerance):
    assert result.clean.map_at_r == pytest.approx(expected.clean.map_at_r, abs=tolerance)
    assert len(result.corrupted) == len(expected.corrupted) == 2
    for mine, theirs in zip(result.corrupted, expected.corrupted, strict=True):
        assert mine.map_at_r == pytest.approx(theirs.map_at_r, abs=tolerance)


@pytest.mark.slow
def test_a_torchscript_export_scores_as_its_run_and_is_cached(tiny_run, tiny_bench, run_scores, tmp_path):
    expected, shared = run_scores
    path = export_torchscript(tiny_run, tmp_path / "run.pt")
    model = load_external_model(str(path), AS_THE_RUN, device="cpu", out=tmp_path / "home")
    result = evaluate(model, _request(tiny_bench, shared), log=_quiet)
    _same_scores(result, expected, 1e-6)
    assert result.embedded == 3 and result.out_dir.parent == tmp_path / "home" / "eval"
    assert result.report.model["kind"] == "torchscript" and result.report.bgaugment is None
    assert result.report.model["input"]["normalize"] == "none"
    assert result.report.corrupted_sets["manifests"] == expected.report.corrupted_sets["manifests"]
    assert "torchscript" in result.summary() and "corrupted (2 repeats)" in result.summary()
    again = evaluate(load_external_model(str(path), AS_THE_RUN, device="cpu", out=tmp_path / "home"),
                     _request(tiny_bench, shared), log=_quiet)
    assert again.embedded == 0 and again.clean.map_at_r == result.clean.map_at_r
    other = ModelInput(normalize="none", l2_normalize=True)  # another convention: another cache key
    assert load_external_model(str(path), other, device="cpu").fingerprint() != model.fingerprint()


@pytest.mark.slow
def test_an_onnx_export_scores_as_its_run(tiny_run, tiny_bench, run_scores, tmp_path):
    expected, shared = run_scores
    path = export_onnx(exported_run(tiny_run), tmp_path / "run.onnx")
    model = load_external_model(str(path), AS_THE_RUN, device="cpu", out=tmp_path / "home")
    _same_scores(evaluate(model, _request(tiny_bench, shared), log=_quiet), expected, 1e-4)
    assert model.network.kind == "onnx" and not model.differentiable


def test_an_onnx_model_exported_for_one_batch_size_gets_its_batches_in_chunks(tmp_path):
    module = tiny_embedder().eval()
    path = export_onnx(module, tmp_path / "fixed.onnx", side=16, dynamic_batch=False)
    model = load_external_model(str(path), ModelInput(), device="cpu", out=tmp_path / "home")
    images = torch.rand(5, 3, 16, 16)
    expected = torch.nn.functional.normalize(module(ModelInput().convention.apply(images)), dim=1)
    torch.testing.assert_close(model.embed(images), expected, atol=1e-5, rtol=1e-5)
    with pytest.raises(ModelError, match=r"(?s)input of shape \(2, 3, 16, 16\).*input_size="):
        model.embed(torch.rand(2, 3, 20, 20))


def test_the_default_home_is_named_by_the_model_and_its_convention(tiny_run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = export_torchscript(tiny_run, tmp_path / "run.pt")
    first = load_external_model(str(path), AS_THE_RUN, device="cpu")
    other = load_external_model(str(path), ModelInput(), device="cpu")
    assert first.home.parent == other.home.parent == Path("runs", "external")
    assert first.home.name.startswith("run.pt-") and first.home != other.home
    assert first.home.name.split("-")[1] == other.home.name.split("-")[1]  # the same model digest
    assert not first.home.exists()  # model.json comes with the first result
    first.claim_home()
    record = json.loads((first.home / MODEL_RECORD).read_text())
    assert record["fingerprint"] == first.fingerprint() and record["label"] == first.label


def test_a_home_holding_another_models_reports_is_refused(tiny_run, tmp_path):
    path = export_torchscript(tiny_run, tmp_path / "run.pt")
    load_external_model(str(path), AS_THE_RUN, device="cpu", out=tmp_path / "home").claim_home()
    with pytest.raises(ModelError, match="another model") as err:
        load_external_model("tests.engine.external:tiny_embedder", ModelInput(), device="cpu",
                            out=tmp_path / "home")
    assert err.value.path == str(tmp_path / "home" / MODEL_RECORD)


def test_a_factory_takes_its_arguments_and_is_pinned_by_its_weights(tmp_path):
    model = load_external_model("tests.engine.external:tiny_embedder", ModelInput(),
                                args=parse_model_args(["dim=5"]), device="cpu", out=tmp_path / "a")
    assert model.embed(torch.rand(3, 3, 16, 16)).shape == (3, 5)
    assert model.network.args == {"dim": 5} and model.describe()["model"]["args"] == {"dim": 5}
    same = load_external_model("tests.engine.external:tiny_embedder", ModelInput(), args={"dim": 5},
                               device="cpu", out=tmp_path / "b")
    assert same.fingerprint() == model.fingerprint()
    changed = tiny_embedder(5)
    with torch.no_grad():
        changed[-1].bias.add_(1)
    assert network_from_module(changed, "x").sha256 != network_from_module(tiny_embedder(5), "x").sha256


def test_outputs_are_read_by_key_and_wrong_ones_refused(tmp_path):
    def load(factory, **options):
        return load_external_model(f"tests.engine.external:{factory}", ModelInput(**options), device="cpu",
                                   out=tmp_path / factory / str(options))
    images = torch.rand(2, 3, 16, 16)
    with pytest.raises(ModelError, match="dict with the entries embedding, logits"):
        load("named_outputs").embed(images)
    assert load("named_outputs", output_key="embedding").embed(images).shape == (2, 8)
    with pytest.raises(ModelError, match=r"shape \(2, 4, 14, 14\) for 2 images; an embedding is one vector"):
        load("feature_maps").embed(images)
    with pytest.raises(ModelError, match="NaN or infinite"):
        load("diverged").embed(images)
    with pytest.raises(ModelError, match="single tensor"):
        load("tiny_embedder", output_key="x").embed(images)
    embedded = load("tiny_embedder").embed(images)
    torch.testing.assert_close(embedded.norm(dim=1), torch.ones(2))
    assert not torch.allclose(load("tiny_embedder", l2_normalize=False).embed(images).norm(dim=1),
                              torch.ones(2))


@pytest.mark.parametrize(("spec", "message"), [
    ("tests.engine.external:not_a_module", "returned int, not a torch.nn.Module"),
    ("tests.engine.external:nowhere", "has no 'nowhere'"),
    ("tests.engine.no_such_module:factory", "cannot be imported"),
    ("no/such/file.pt", "no such model file"),
])
def test_factories_and_paths_that_give_no_model_are_named(spec, message, tmp_path):
    with pytest.raises(ModelError, match=message):
        load_external_model(spec, ModelInput(), device="cpu", out=tmp_path / "home")


def test_factory_arguments_are_refused_where_they_do_not_fit(tiny_run, tmp_path):
    with pytest.raises(ModelError, match="refused its arguments"):
        load_external_model("tests.engine.external:tiny_embedder", ModelInput(), args={"width": 3},
                            device="cpu", out=tmp_path / "a")
    path = export_torchscript(tiny_run, tmp_path / "run.pt")
    with pytest.raises(ModelError, match="takes none"):
        load_external_model(str(path), ModelInput(), args={"dim": 3}, device="cpu", out=tmp_path / "b")
    with pytest.raises(ModelError, match="key=value"):
        parse_model_args(["dim"])
    assert parse_model_args(["dim=3", "pretrained=false", "name=resnet50"]) == {
        "dim": 3, "pretrained": False, "name": "resnet50"}


def test_pickled_models_are_refused_unopened_with_the_recipe(tmp_path):
    zipped, legacy = tmp_path / "model.pt", tmp_path / "legacy.pt"
    torch.save(tiny_embedder(), zipped)
    torch.save(tiny_embedder(), legacy, _use_new_zipfile_serialization=False)
    for path in (zipped, legacy):
        with pytest.raises(ModelError, match=r"pickled torch\.save file") as err:
            load_external_model(str(path), ModelInput(), device="cpu", out=tmp_path / "home")
        assert "torch.jit.save(torch.jit.script(" in err.value.fix and "factory" in err.value.fix
    state = tmp_path / "state.pt"
    torch.save(tiny_embedder().state_dict(), state)
    with pytest.raises(ModelError, match="pickled"):
        load_external_model(str(state), ModelInput(), device="cpu", out=tmp_path / "home")


def test_a_runs_own_checkpoint_is_refused_with_the_option_that_reads_it(tiny_run, tmp_path):
    with pytest.raises(ModelError, match="pickled") as err:
        load_external_model(str(tiny_run / "checkpoints" / "best.pt"), ModelInput(), device="cpu",
                            out=tmp_path / "home")
    assert err.value.fix == (f"it is a checkpoint of the bgbias run {tiny_run}: score the run itself "
                             f"({tiny_run})")


def test_files_that_are_neither_torchscript_nor_onnx_are_named(tmp_path):
    text = tmp_path / "notes.onnx"
    text.write_text("not a model")
    with pytest.raises(ModelError, match="neither TorchScript nor ONNX"):
        load_external_model(str(text), ModelInput(), device="cpu", out=tmp_path / "home")
    archive = tmp_path / "other.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("readme.txt", "hello")
    with pytest.raises(ModelError, match="not a TorchScript one"):
        load_external_model(str(archive), ModelInput(), device="cpu", out=tmp_path / "home")


def test_a_factory_spec_is_told_from_a_file(tmp_path):
    assert is_factory("torchvision.models:resnet50") and is_factory("timm:create_model")
    assert not is_factory("model.pt") and not is_factory("models/model.onnx")


@pytest.mark.slow
def test_another_input_size_brings_its_own_images_and_manifests(tiny_bench, run_scores, tmp_path,
                                                                monkeypatch):
    _, shared = run_scores
    monkeypatch.chdir(tmp_path)  # manifests=None: the default corrupted/ of the working folder
    model = load_external_model("tests.engine.external:tiny_embedder", ModelInput(input_size=64),
                                device="cpu", out=tmp_path / "home")
    result = evaluate(model, _request(tiny_bench, shared, manifests=None), log=_quiet)
    assert result.report.geometry == {"resize": 64, "crop": 64}
    manifest = result.report.corrupted_sets["manifests"][0]["path"]
    assert "seed-0-resize64-crop64" in manifest


def test_a_plain_callable_is_scored_under_the_fingerprint_its_caller_gives(tiny_bench, tmp_path):
    module = tiny_embedder().eval()
    network = network_from_callable(lambda inputs: module(inputs), "lambda", fingerprint="v1")
    model = external_model(network, ModelInput(), torch.device("cpu"), tmp_path / "home")
    result = evaluate(model, _request(tiny_bench, tmp_path, corrupted=False), log=_quiet)
    assert result.report.model["kind"] == "callable" and 0 <= result.clean.map_at_r <= 1


@pytest.mark.slow
def test_smoothgrad_explains_a_torchscript_model_and_refuses_an_onnx_one(tiny_run, tiny_bench, tmp_path):
    request = _request(tiny_bench, tmp_path, limit=2, gallery_count=1, corrupted=False)
    scripted = load_external_model(str(export_torchscript(tiny_run, tmp_path / "run.pt")), AS_THE_RUN,
                                   device="cpu", out=tmp_path / "ts")
    result = explain(scripted, request, log=_quiet)
    assert result.summary["images"] == 2 and result.out_dir.parents[1] == tmp_path / "ts"
    onnx = load_external_model(str(export_onnx(exported_run(tiny_run), tmp_path / "run.onnx")), AS_THE_RUN,
                               device="cpu", out=tmp_path / "onnx")
    with pytest.raises(OptionError, match="differentiates the model") as err:
        explain(onnx, request, log=_quiet)
    assert "TorchScript" in err.value.fix
    with pytest.raises(OptionError, match="cannot explain"):  # SAM needs named feature maps
        explain(scripted, _request(tiny_bench, tmp_path, limit=2, attribution="sam"), log=_quiet)


def test_a_model_without_a_training_dataset_needs_one_named(tmp_path):
    model = load_external_model("tests.engine.external:tiny_embedder", ModelInput(), device="cpu",
                                out=tmp_path / "home")
    with pytest.raises(OptionError, match="records no training dataset"):
        evaluate(model, MeasureRequest(), log=_quiet)


class _FixedReshape(torch.nn.Module):
    """Exported with a dynamic batch, but reshapes to two rows: onnxruntime fails on any other batch."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return images.mean(dim=(2, 3)).reshape(2, -1)


def test_in_memory_models_and_onnx_sessions_that_fail_at_run_time_are_model_errors(tmp_path):
    cpu, images = torch.device("cpu"), torch.rand(3, 3, 16, 16)
    raising = external_model(network_from_module(misbehaving("raises"), "mine"), ModelInput(), cpu,
                             tmp_path / "a")
    with pytest.raises(ModelError, match=r"mine failed on a batch of shape \(3, 3, 16, 16\) \(ValueError"):
        raising.embed(images)
    complex_valued = network_from_callable(lambda inputs: inputs.mean(dim=(2, 3)) * 1j, "spin", "v1")
    with pytest.raises(ModelError, match="spin gave embeddings of dtype complex64"):
        external_model(complex_valued, ModelInput(), cpu, tmp_path / "b").embed(images)
    path = export_onnx(_FixedReshape(), tmp_path / "reshape.onnx", side=16)
    onnx = load_external_model(str(path), ModelInput(), device="cpu", out=tmp_path / "c")
    assert onnx.embed(images[:2]).shape == (2, 3)
    with pytest.raises(ModelError, match=r"reshape\.onnx failed on a batch of shape \(3, 3, 16, 16\)") as err:
        onnx.embed(images)
    assert err.value.path == str(path.resolve())
    assert not any((tmp_path / name).exists() for name in "abc")  # nothing was claimed


def test_another_tools_model_json_above_the_home_does_not_make_a_home(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / MODEL_RECORD).write_text('{"name": "some other tool"}')
    model = load_external_model("tests.engine.external:tiny_embedder", ModelInput(), device="cpu",
                                out=project / "home")
    model.claim_home()
    assert json.loads((project / "home" / MODEL_RECORD).read_text())["fingerprint"] == model.fingerprint()
