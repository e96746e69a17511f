"""The public API: lazy names on `bgbias`, and each function doing what its command does."""

from __future__ import annotations

import inspect
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import bgbias
from bgbias.errors import ModelError, OptionError
from bgbias.options import choices, limits
from bgbias.retrieval.metrics import score_embeddings
from tests.engine.external import tiny_embedder

ROOT = Path(__file__).resolve().parents[1]


def test_importing_bgbias_loads_no_heavy_library_and_every_public_name_resolves():
    code = ("import sys, bgbias; "
            "print([m for m in ('torch', 'numpy', 'PIL', 'faiss') if m in sys.modules])")
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""}).stdout
    assert printed.strip() == "[]"
    assert all(callable(getattr(bgbias, name)) for name in bgbias.__all__)
    assert set(bgbias.__all__) <= set(dir(bgbias))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        bgbias.nothing  # noqa: B018


def _options(bench):
    return dict(root=bench / "bench", masks=bench / "masks", backgrounds=bench / "backgrounds", repeats=2,
                workers=0)


@pytest.mark.slow
def test_a_run_folder_is_scored_as_bgbias_eval_scores_it(tiny_run, tiny_bench, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    result = bgbias.evaluate(run, "bench", manifests=tmp_path / "manifests", out=run, **_options(tiny_bench))
    assert result.out_dir.parent == run / "eval" and result.report.method == "triplet"
    again = bgbias.evaluate(run / "checkpoints" / "best.pt", "bench", manifests=tmp_path / "manifests",
                            out=run, **_options(tiny_bench))
    in_memory = bgbias.evaluate(run, "bench", manifests=tmp_path / "manifests", **_options(tiny_bench))
    assert in_memory.out_dir is None and in_memory.report.clean == result.report.clean
    with pytest.raises(OptionError, match="is not the run's folder") as refused:
        bgbias.evaluate(run, "bench", out=tmp_path / "elsewhere", **_options(tiny_bench))
    assert refused.value.fix.startswith(f"pass out={str(run)!r}")
    assert again.embedded == 0 and again.report.clean == result.report.clean


def test_a_function_is_scored_only_under_a_fingerprint(tiny_bench, tmp_path):
    module = tiny_embedder().eval()  # on the CPU: a function runs where its weights are, so device="cpu"
    with pytest.raises(ModelError, match="fingerprint="):
        bgbias.evaluate(lambda x: module(x), "bench", out=tmp_path / "a", **_options(tiny_bench))
    result = bgbias.evaluate(lambda x: module(x), "bench", fingerprint="tiny-v1", corrupted=False,
                             out=tmp_path / "a", device="cpu", **_options(tiny_bench))
    as_module = bgbias.evaluate(module, "bench", corrupted=False, out=tmp_path / "b", **_options(tiny_bench))
    assert result.clean.map_at_r == pytest.approx(as_module.clean.map_at_r, abs=1e-6)
    with pytest.raises(ModelError, match="cannot score a int"):
        bgbias.evaluate(3, "bench")


def test_precomputed_embeddings_make_the_report_of_their_scores(tmp_path):
    rng = np.random.default_rng(1)
    labels = np.repeat(np.arange(6), 4)
    clean = rng.normal(size=(24, 8)).astype(np.float32)
    corrupted = [clean + rng.normal(size=clean.shape).astype(np.float32) for _ in range(2)]
    result = bgbias.evaluate_embeddings(torch.from_numpy(clean), torch.from_numpy(labels), corrupted,
                                        out=tmp_path / "report", about={"method": "mine"})
    assert result.report.clean.map_at_r == pytest.approx(score_embeddings(clean, labels).map_at_r)
    assert result.report.corrupted.repeats[1].map_at_r == pytest.approx(
        score_embeddings(corrupted[1], labels).map_at_r)
    assert result.report.method == "mine" and (tmp_path / "report" / "report.md").is_file()
    assert bgbias.evaluate_embeddings(clean, labels).files == {}


@pytest.mark.parametrize("labels", [[0], [0, 1, 2]], ids=["one image", "no classmates"])
def test_the_summary_of_a_set_where_no_query_has_a_classmate_says_so(labels):
    clean = np.eye(len(labels), 4, dtype=np.float32)
    result = bgbias.evaluate_embeddings(clean, labels, [clean, clean])
    summary = result.summary()
    assert result.report.scored == 0 and "None" not in summary
    assert "no image has another of its class: no query was scored" in summary


@pytest.mark.parametrize(("about", "field", "wanted"), [
    ({"seed": "x"}, 'seed "x"', "an integer or null"),
    ({"bgaugment": "yes"}, 'bgaugment "yes"', "true or false or null"),
    ({"checkpoint": {"path": 3}}, "checkpoint.path 3", "a string"),
])
def test_about_entries_of_another_type_than_the_report_declares_are_refused_before_anything_is_written(
        tmp_path, about, field, wanted):
    clean, labels = np.eye(4, dtype=np.float32), np.array([0, 0, 1, 1])
    with pytest.raises(OptionError) as err:
        bgbias.evaluate_embeddings(clean, labels, [clean], out=tmp_path / "report", about=about)
    assert err.value.problem == f"about= gives the report's field {field}; it must be {wanted}"
    assert "about=" in err.value.fix and "Traceback" not in str(err.value)
    assert not (tmp_path / "report").exists()
    free = bgbias.evaluate_embeddings(clean, labels, about={"seed": 3, "note": {"any": ["shape"]}})
    assert free.report.seed == 3 and free.report.note == {"any": ["shape"]}


def test_corrupted_sets_go_where_evaluation_looks(tiny_bench, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    made = bgbias.make_corrupted_sets("bench", tiny_bench / "bench", repeats=2,
                                      variants=["random-bg", "only-fg"],
                                      backgrounds=tiny_bench / "backgrounds")
    paths = made["random-bg"]
    key = paths[0].parts[1]
    assert [p.as_posix() for p in paths] == [f"corrupted/{key}/test/seed-0/repeat-{r}.json" for r in (0, 1)]
    assert [p.parent.as_posix() for p in made["only-fg"]] == [f"corrupted/{key}/test/seed-0/only-fg"]


CHECKED_WHERE_READ = {
    "evaluate": {"model", "dataset"},
    "explain": {"model", "dataset"},
    "evaluate_embeddings": {"clean", "labels", "corrupted"},
    "score_embeddings": {"embeddings", "labels"},
    "make_masks": {"dataset"},
    "make_corrupted_sets": {"dataset"},
    "score": set(),
    "leakage": {"dataset", "model"},
    "audit": {"dataset", "models"},
}


def _declared(name):
    return getattr(bgbias, name).arguments.declared


@pytest.mark.parametrize("name", sorted(CHECKED_WHERE_READ))
def test_every_argument_of_every_api_function_is_declared_or_has_a_check_of_its_own(name):
    parameters = set(inspect.signature(getattr(bgbias, name)).parameters)
    assert parameters == set(_declared(name)) | CHECKED_WHERE_READ[name]


class _Wrong:
    def __repr__(self) -> str:
        return "<wrong>"


@pytest.mark.parametrize(("name", "argument"), [(name, argument) for name in sorted(CHECKED_WHERE_READ)
                                                for argument in sorted(_declared(name))])
def test_a_wrong_argument_is_an_option_error_named_as_python_names_it(name, argument):
    required = {"evaluate": {"model": None}, "explain": {"model": None},
                "evaluate_embeddings": {"clean": None, "labels": None},
                "score_embeddings": {"embeddings": None, "labels": None},
                "make_masks": {"dataset": "bench"}, "make_corrupted_sets": {"dataset": "bench"},
                "score": {"embeddings": "embeddings", "dataset": "bench"},
                "leakage": {"dataset": "bench"}, "audit": {"dataset": "bench"}}[name]
    with pytest.raises(OptionError) as err:
        getattr(bgbias, name)(**{**required, argument: _Wrong()})
    assert err.value.problem.startswith(f"{argument}=<wrong> is invalid: it must be ")
    assert err.value.fix.startswith(f"pass {argument}=") and "--" not in err.value.fix
    assert err.value.parameter == argument


@pytest.mark.slow
def test_the_issues_repeats_are_refused_before_any_work(tiny_bench, tmp_path):
    module = tiny_embedder().eval()
    for repeats, message in [(0, "repeats=0 is invalid: it must be an integer of at least 1"),
                             (-1, "repeats=-1 is invalid"), ("2", "repeats='2' is invalid")]:
        with pytest.raises(OptionError, match=message) as err:
            bgbias.evaluate(module, "bench", **{**_options(tiny_bench), "repeats": repeats},
                            out=tmp_path / "home")
        assert err.value.fix == "pass repeats=5"
    result = bgbias.evaluate(module, "bench", **{**_options(tiny_bench), "repeats": np.int64(1)},
                             manifests=tmp_path / "manifests", out=tmp_path / "home")
    assert len(result.report.corrupted.repeats) == 1  # numpy integers are integers


def test_arguments_checked_where_they_are_read_are_refused_with_their_python_names(tmp_path):
    clean, labels = np.eye(4, dtype=np.float32), np.array([0, 0, 1, 1])
    report = bgbias.evaluate_embeddings
    refusals = [
        (lambda: bgbias.evaluate(None, "bench", model_input=3), "model_input=3 is invalid: it must be a bgb"),
        (lambda: bgbias.evaluate(None, "bench", log=3), "log=3 is invalid: it must be a function"),
        (lambda: bgbias.make_corrupted_sets("bench", variants="random-bg"), "variants='random-bg' is inv"),
        (lambda: report(clean, labels, ids="abcd"), "ids='abcd' is invalid: it must be a list of strings"),
        (lambda: report(clean, labels, ids=list(range(9))), r"ids=\[0, 1, 2, 3, 4, 5, \.\.\.\] is invalid"),
        (lambda: report(clean, labels, about=["x"]), r"about=\['x'\] is invalid: it must be a dict"),
        (lambda: report(clean, labels, clean), "corrupted= must be a list of arrays"),
        (lambda: report(clean, labels, [clean[:3]]), r"corrupted\[0\]= has shape \(3, 4\)"),
        (lambda: report(clean, labels, ids=["a"]), "ids= must be a list of 4 strings"),
        (lambda: report(clean * np.nan, labels), "clean= holds NaN"),
        (lambda: report(clean * 1j, labels), "clean= must be a 2-D array of real numbers"),
        (lambda: report([[1, 2], [3]], labels), "clean= must be a 2-D array"),
        (lambda: report(clean, labels[:3]), r"labels= must give one label per embedding"),
        (lambda: bgbias.score_embeddings([[1.0, 2.0]], [0, 1]), r"labels= must give one label per embedding"),
        (lambda: bgbias.score_embeddings("x", [0]), "embeddings= must be a 2-D array"),
        (lambda: bgbias.BGAugment("backgrounds", seed=-1), "seed=-1 is invalid"),
        (lambda: bgbias.BGAugment("backgrounds", p="0.5"), "p='0.5' is invalid: it must be a probability in"),
        (lambda: bgbias.MaskedImages("bench", crop=0), "crop=0 is invalid"),
        (lambda: bgbias.MaskedImages("bench", fold=4), "fold=4 is invalid: it must be an integer from 0"),
    ]
    for call, message in refusals:
        with pytest.raises(OptionError, match=message):
            call()
    near = [[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]]
    assert bgbias.score_embeddings(near, [0, 0, 1, 1]).map_at_r == 1


def test_a_report_of_embeddings_never_goes_into_a_run_folder(tiny_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    clean, labels = np.eye(4, dtype=np.float32), np.array([0, 0, 1, 1])
    with pytest.raises(OptionError, match="lies inside the bgbias run folder"):
        bgbias.evaluate_embeddings(clean, labels, out=run / "eval" / "bench-test")
    assert not (run / "eval").exists()


def test_the_command_line_types_its_options_from_the_api_s_declarations():
    from click import Choice, IntRange

    from bgbias.cli import main
    from bgbias.models.model_input import ARGUMENTS

    checked = 0
    for command, function in [("eval", "evaluate"), ("corrupt", "make_corrupted_sets"), ("score", "score"),
                              ("leakage", "leakage"), ("audit", "audit"), ("masks", "make_masks"),
                              ("explain", "explain")]:
        declared = {**_declared(function), **ARGUMENTS.declared}
        for param in main.commands[command].params:
            kind = declared.get(param.name)
            bounded = kind is not None and (choices(kind) or limits(kind) != (None, None))
            if not bounded or param.name == "max_memory":  # --max-memory reads sizes (512M) as bytes
                continue
            checked += 1
            if choices(kind):
                assert isinstance(param.type, Choice) and tuple(param.type.choices) == choices(kind)
            else:
                assert isinstance(param.type, IntRange), param.opts
                assert (param.type.min, param.type.max) == limits(kind), param.opts
    assert checked == 47, checked


@pytest.mark.slow
def test_the_memory_ceiling_reaches_every_scoring_of_an_evaluation(tiny_bench, tmp_path, monkeypatch):
    from bgbias.measurement import scoring
    from bgbias.retrieval import metrics

    ceilings = []

    def spy(score):
        def scored(*args, max_memory, **options):
            ceilings.append(max_memory)
            return score(*args, max_memory=max_memory, **options)
        return scored

    monkeypatch.setattr(metrics, "score_embeddings", spy(metrics.score_embeddings))
    monkeypatch.setattr(scoring, "score_embeddings", spy(scoring.score_embeddings))
    bgbias.evaluate(tiny_embedder().eval(), "bench", **{**_options(tiny_bench), "repeats": 1}, profile=True,
                    worst_k=1, max_memory=12345, manifests=tmp_path / "manifests", out=tmp_path / "home")
    assert len(ceilings) > 3 and set(ceilings) == {12345}  # clean, corrupted, query-side, the variants


def test_a_whole_folder_of_one_s_own_is_scored_by_default_and_split_test_scores_half(tmp_path):
    from tests.replicas import make_folder

    root = make_folder(tmp_path / "products", per_class=2)
    module = tiny_embedder().eval()
    whole = bgbias.evaluate(module, "folder", root=root, corrupted=False, workers=0, out=tmp_path / "all")
    half = bgbias.evaluate(module, "folder", root=root, split="test", corrupted=False, workers=0,
                           out=tmp_path / "test")
    assert whole.report.images == 16 and half.report.images == 8  # the DML test split: half the classes
    assert whole.report.split == "all" and half.report.split == "test"


def _own_preprocessing_scores(model, transform, bench: Path):
    """The clean test split's scores with the model fed by its own preprocessing, outside bgbias."""
    from bgbias.data.images import load_image
    from bgbias.data.registry import open_dataset
    from bgbias.data.splits import split_items

    items = split_items(open_dataset("bench", bench / "bench"), "test")
    with torch.no_grad():
        embeddings = model(torch.stack([transform(load_image(item.image)) for item in items]))
    embeddings = torch.nn.functional.normalize(embeddings, dim=1).numpy()
    return score_embeddings(embeddings, np.array([item.label for item in items]))


@pytest.mark.slow
def test_a_timm_model_is_scored_on_the_pixels_of_its_own_preprocessing(tiny_bench, tmp_path, monkeypatch):
    timm = pytest.importorskip("timm")
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    model = timm.create_model("test_convnext", pretrained=False, num_classes=0).eval()  # pooled features
    transform = timm.data.create_transform(**timm.data.resolve_model_data_config(model))
    expected = _own_preprocessing_scores(model, transform, tiny_bench)
    model_input = bgbias.ModelInput.from_timm(model)
    options = {**_options(tiny_bench), "backgrounds": tiny_bench / "backgrounds"}
    result = bgbias.evaluate(model, "bench", model_input=model_input, out=tmp_path / "timm", **options)
    assert result.report.clean.map_at_r == pytest.approx(expected.map_at_r, abs=1e-6)
    assert result.report.clean.precision_at_1 == pytest.approx(expected.precision_at_1, abs=1e-6)
    assert result.report.geometry == {"resize": 168, "crop": 160, "interpolation": "bicubic"}  # 160 / 0.95
    assert result.report.model["input"]["interpolation"] == "bicubic"
    manifest = Path(result.report.corrupted_sets["manifests"][0]["path"])
    assert manifest.parent.name == "seed-0-resize168-crop160-bicubic"
    again = bgbias.evaluate(model, "bench", model_input=model_input, out=tmp_path / "timm", **options)
    assert again.embedded == 0


@pytest.mark.slow
def test_a_torchvision_model_is_scored_on_the_pixels_of_its_weights_preset(tiny_bench, tmp_path):
    import torchvision

    member = torchvision.models.MobileNet_V2_Weights.IMAGENET1K_V1
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v2(num_classes=16).eval()  # random weights, as no download is made
    expected = _own_preprocessing_scores(model, member.transforms(), tiny_bench)
    result = bgbias.evaluate(model, "bench", model_input=bgbias.ModelInput.from_torchvision(member),
                             corrupted=False, out=tmp_path / "tv", **_options(tiny_bench))
    assert result.report.clean.map_at_r == pytest.approx(expected.map_at_r, abs=1e-6)
    assert result.report.geometry == {"resize": 256, "crop": 224}
