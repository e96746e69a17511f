"""Explain outputs named by attribution: one folder per attribution and options, --force confined to its own
folder, the readers (runs table, comparison gallery) per attribution, refusal of unsupported models, and the
command line's --attribution-option and `bgbias methods`."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from click.testing import CliRunner

from bgbias.attribution.outputs import explained_sets
from bgbias.attribution.run import ExplainInputs, explain_items
from bgbias.attribution.run import explain as explain_model
from bgbias.cli import main
from bgbias.data.registry import open_dataset
from bgbias.data.splits import split_items
from bgbias.data.transforms import EvalGeometry
from bgbias.engine.method_model import MethodModel
from bgbias.engine.trained import load_trained
from bgbias.errors import OptionError
from bgbias.measurement.request import MeasureRequest
from bgbias.methods.attribution import ATTRIBUTIONS, register_attribution
from bgbias.report.compare import compare_runs
from bgbias.report.runs_table import collect_runs, table_one
from tests.attribution.tiny import baseline
from tests.report.synthetic import make_report

UNIFORM = "test_uniform"


@pytest.fixture(scope="module")
def uniform():
    """A second attribution, registered for these tests only: every pixel at ``level``."""

    @register_attribution(UNIFORM)
    class Uniform:
        """Every pixel the same."""

        serves = "any model"

        def __init__(self, level: float = 0.5):
            self.level = level

        def options(self):
            return {"level": self.level}

        def supports(self, model):
            return True

        def __call__(self, model, images01, generator):
            return torch.full((len(images01), *images01.shape[2:]), self.level, device=images01.device)

    yield Uniform
    ATTRIBUTIONS.unregister(UNIFORM)


def explain(trained, options=None, seed=0, **settings):
    settings = {"limit": 2, "gallery_count": 1, "progress": False, **settings}
    request = MeasureRequest(attribution_options=options or {}, attribution_seed=seed, **settings)
    return explain_model(trained, request, log=lambda _line: None)


def files(folder):
    return {path.relative_to(folder): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


@pytest.fixture(scope="module")
def key(tiny_bench):
    return open_dataset("bench", tiny_bench / "bench").key


@pytest.fixture(scope="module")
def explained_runs(tiny_run, uniform, tmp_path_factory):
    """Two runs (without and with BGAugment), each explained by SmoothGrad (2 copies) and the uniform map."""
    runs = tmp_path_factory.mktemp("explained")
    for name, bgaugment in (("vanilla", False), ("bgaugment", True)):
        shutil.copytree(tiny_run, runs / name)
        config = json.loads((runs / name / "config.json").read_text())
        config["bgaugment"]["enabled"] = bgaugment
        (runs / name / "config.json").write_text(json.dumps(config))
        trained = load_trained(runs / name, device="cpu")
        explain(trained, options={"copies": 2})
        explain(trained, attribution=UNIFORM)
    return runs


@pytest.mark.slow
def test_each_attribution_and_setting_gets_its_own_folder(explained_runs, key):
    folder = explained_runs / "vanilla" / "explain"
    names = {f"{key}-test-smoothgrad-copies2": "smoothgrad", f"{key}-test-{UNIFORM}": UNIFORM}
    # Beside each folder: the lock its writer holds (`.<folder>.lock`).
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == sorted(names)
    for name, attribution in names.items():
        summary = json.loads((folder / name / "summary.json").read_text())
        assert summary["attribution"] == attribution and summary["images"] == 2
    found = explained_sets(explained_runs / "vanilla", "test")
    assert [(s.dataset_key, s.label) for s in found] == [(key, "smoothgrad-copies2"), (key, UNIFORM)]
    assert explained_sets(explained_runs / "vanilla", "val") == []


def test_force_starts_over_in_its_own_folder_only(explained_runs, key, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(explained_runs / "vanilla", run)
    trained = load_trained(run, device="cpu")
    smoothgrad = run / "explain" / f"{key}-test-smoothgrad-copies2"
    other = run / "explain" / f"{key}-test-{UNIFORM}"
    before = files(other)
    with pytest.raises(OptionError, match=r"other settings \(seed\)"):
        explain(trained, options={"copies": 2}, seed=1)
    result = explain(trained, options={"copies": 2}, seed=1, force=True)
    assert result.out_dir == smoothgrad and result.summary["seed"] == 1
    assert files(other) == before
    # Other options are another folder: nothing to refuse, nothing deleted.
    third = explain(trained, options={"copies": 3})
    assert third.out_dir.name == f"{key}-test-smoothgrad-copies3"
    assert json.loads((smoothgrad / "summary.json").read_text())["seed"] == 1
    assert files(other) == before


def _evaluated(runs, tmp_path, key):
    """Copies of the explained runs with a synthetic evaluation report, as `bgbias report` needs."""
    copies = []
    for seed, (name, bgaugment) in enumerate((("vanilla", False), ("bgaugment", True))):
        shutil.copytree(runs / name, tmp_path / name)
        report = {**make_report("triplet", bgaugment, key, seed=seed), "run": str(tmp_path / name)}
        (tmp_path / name / "eval" / f"{key}-test").mkdir(parents=True)
        (tmp_path / name / "eval" / f"{key}-test" / "report.json").write_text(json.dumps(report))
        copies.append(tmp_path / name)
    return copies


@pytest.mark.slow
def test_the_runs_table_has_one_entry_per_run_and_attribution(explained_runs, key, tmp_path):
    reports, foreground = collect_runs(_evaluated(explained_runs, tmp_path, key))
    assert sorted(foreground) == [("triplet", b, key, label) for b in (False, True)
                                  for label in ("smoothgrad-copies2", UNIFORM)]
    assert foreground["triplet", False, key, UNIFORM].attribution == UNIFORM
    headers, rows = table_one(reports, foreground)
    assert headers[-2:] == [f"{key} fg score (smoothgrad-copies2)", f"{key} fg score ({UNIFORM})"]
    assert [row[-1] for row in rows] == ["0.00 ± 0.00"] * 2  # a uniform map is spread as the object's area


def test_the_gallery_compares_one_attribution_across_runs(explained_runs, key, tmp_path):
    runs = [explained_runs / "vanilla", explained_runs / "bgaugment"]
    assert compare_runs(runs, "test", tmp_path) == []  # no run has SmoothGrad at its defaults
    galleries = compare_runs(runs, "test", tmp_path, UNIFORM)
    assert [g.name for g in galleries] == [f"foreground-{key}-test-{UNIFORM}.png"]
    assert [g.name for g in compare_runs(runs, "test", tmp_path, "smoothgrad-copies2")] == [
        f"foreground-{key}-test-smoothgrad-copies2.png"]


def test_a_model_the_attribution_does_not_support_is_refused_before_any_work(tiny_bench, tmp_path):
    method = baseline()
    method.backbone.convention = None
    items = split_items(open_dataset("bench", tiny_bench / "bench"), "test")[:2]
    with pytest.raises(OptionError, match="attribution 'smoothgrad' cannot explain 'contrastive'") as raised:
        inputs = ExplainInputs(items, EvalGeometry(resize=32, crop=32), "bench", tmp_path / "none",
                               tmp_path / "out")
        explain_items(MethodModel(method, torch.device("cpu")), inputs)
    assert "serves every model with an input convention" in raised.value.fix
    assert not (tmp_path / "out").exists()


# -------------------------------------------------------------------------------------------- command line
def test_explain_takes_attribution_options(tiny_run, key, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    args = ["explain", "--checkpoint", str(run), "--limit", "2", "--gallery", "1", "--device", "cpu",
            "--no-progress", "--attribution-option", "copies=2", "--attribution-option", "noise=0.3"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    folder = run / "explain" / f"{key}-test-smoothgrad-copies2-noise0.3"
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["options"] == {"copies": 2, "noise": 0.3, "clip_percentile": 99.0, "batch": 50}


@pytest.mark.parametrize(
    ("pair", "message"),
    [("copies", "--attribution-option expects key=value, got 'copies'"),
     ("sigma=0.2", "attribution 'smoothgrad' has no option 'sigma'"),
     ("copies=0", "setting smoothgrad.copies = 0 is invalid")],
)
def test_bad_attribution_options_fail_before_the_model_is_loaded(pair, message, tmp_path):
    # No run exists here: the options are checked first.
    result = CliRunner().invoke(main, ["explain", "--runs", str(tmp_path), "--attribution-option", pair])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"error: {message}" in result.output
    if "invalid" not in message:
        assert "copies, noise, clip_percentile, batch" in result.output


def test_an_unknown_attribution_names_the_known_ones(tmp_path):
    result = CliRunner().invoke(main, ["explain", "--runs", str(tmp_path), "--attribution", "smoothgrd"])
    assert result.exit_code == 2
    assert "unknown attribution method 'smoothgrd'" in result.output
    assert "did you mean 'smoothgrad'" in result.output


def test_methods_lists_the_attributions_with_their_options():
    result = CliRunner().invoke(main, ["methods"])
    assert result.exit_code == 0
    assert "attributions:" in result.output and "  smoothgrad: The paper's attribution" in result.output
    assert "copies=25, noise=0.15, clip_percentile=99.0, batch=50" in result.output
