"""SAM's similarity attention as an attribution for any model (``--attribution sam``): the maps (range,
shape, determinism, Grad-CAM of the Siamese score, the swapped pair), the stage option, the reference images
(nearest classmates by the model's retrieval, from the whole split), the runner's extra columns, gallery and
resume for a baseline and DCML, and the command line; SmoothGrad's files keep their form."""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from PIL import Image

from bgbias.attribution.heatmap import attribution_gallery_image
from bgbias.attribution.outputs import CSV_COLUMNS, REFERENCE_COLUMNS
from bgbias.attribution.references import nearest_references, pick_references
from bgbias.attribution.run import ExplainInputs, explain, explain_items
from bgbias.cli import main
from bgbias.data.eval_images import EvalImages
from bgbias.data.registry import open_dataset
from bgbias.data.splits import split_items
from bgbias.data.transforms import EvalGeometry
from bgbias.engine import split_states as split_states_module
from bgbias.engine.embedding import embed_images
from bgbias.engine.method_model import MethodModel
from bgbias.engine.trained import load_trained
from bgbias.errors import OptionError
from bgbias.measurement.request import MeasureRequest, requested_split
from bgbias.methods.attribution import (
    build_attribution,
    check_supported,
    needs_references,
    parse_attribution_options,
)
from bgbias.methods.embedding_model import FeatureMaps
from bgbias.methods.sam.explainer import SimilarityAttention, pair_maps
from bgbias.retrieval.retrievers import ExactL2
from tests.attribution.tiny import baseline
from tests.methods.test_contract import build
from tests.replicas import make_bench

SIDE = 32
GEOMETRY = EvalGeometry(resize=SIDE, crop=SIDE)


def images(count: int = 3, seed: int = 0) -> torch.Tensor:
    return torch.rand(count, 3, SIDE, SIDE, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return MethodModel(baseline(), torch.device("cpu"), home=tmp_path_factory.mktemp("home"))


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """The test split of a bench of 3 classes with 4 images each."""
    root = make_bench(tmp_path_factory.mktemp("bench"), train_classes=1, val_classes=1, test_classes=3,
                      per_class=4)
    return split_items(open_dataset("bench", root), "test")


def run(model, items, out_dir, reference_items=None, options=None, **settings):
    inputs = ExplainInputs(items, GEOMETRY, "bench", out_dir.parent / "no-masks", out_dir,
                           reference_items=reference_items)
    request = MeasureRequest(**{"attribution": "sam", "attribution_options": options or {}, "batch_size": 2,
                                "gallery_count": 2, "progress": False, **settings})
    return explain_items(model, inputs, request)


def read_csv(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def nearest_classmates(model, pool):
    """Each pool image's nearest other image of its class by squared L2 of the embeddings, computed here."""
    state, labels = embed_images(model, EvalImages(pool, GEOMETRY), torch.device("cpu"))
    vectors = state["embedding"].astype(np.float64)
    distances = ((vectors[:, None] - vectors[None]) ** 2).sum(-1)
    distances[labels[:, None] != labels[None]] = np.inf
    np.fill_diagonal(distances, np.inf)
    return {item.id: pool[int(distances[i].argmin())].id for i, item in enumerate(pool)}


# -------------------------------------------------------------------------------------------------- maps
def test_sam_is_registered_with_references_and_a_stage_option(model):
    attribution = build_attribution("sam")
    assert isinstance(attribution, SimilarityAttention) and needs_references(attribution)
    assert attribution.options() == {"stage": None}
    assert parse_attribution_options("sam", ["stage=stride4"]) == {"stage": "stride4"}
    assert isinstance(model, FeatureMaps) and attribution.supports(model)
    assert not needs_references(build_attribution("smoothgrad"))


def test_maps_lie_in_the_unit_range_one_per_image_and_repeat(model):
    queries, references = images(3, 0), images(3, 1)
    maps = SimilarityAttention()(model, queries, None, references)
    assert maps.shape == (3, SIDE, SIDE) and maps.dtype == torch.float32
    assert float(maps.min()) >= 0.0 and torch.allclose(maps.amax(dim=(1, 2)), torch.ones(3))
    assert torch.equal(SimilarityAttention()(model, queries, None, references), maps)
    one_by_one = torch.cat([SimilarityAttention()(model, queries[i:i + 1], None, references[i:i + 1])
                            for i in range(3)])
    assert torch.allclose(one_by_one, maps, atol=1e-5)
    assert all(parameter.grad is None for parameter in model.method.parameters())


def test_maps_are_grad_cam_of_the_siamese_score(model):
    """Computed here from the backbone's stages and the head, as SAM's equations state them."""
    method, stage = model.method, "stride4"
    queries, references = images(2, 0), images(2, 1)
    pair = torch.cat([queries, references])
    features = method.backbone(pair, (stage,))[stage].detach().requires_grad_(True)
    embeddings = F.normalize(method.head(method.backbone.forward_from(stage, features)["final"]), dim=1)
    weights = (1 - (embeddings[:2] - embeddings[2:]).abs()).detach()
    score = (weights * embeddings[:2].abs()).sum() + (weights * embeddings[2:].abs()).sum()  # s = wᵀ|f|
    (gradient,) = torch.autograd.grad(score, features)
    cam = F.relu((gradient.mean(dim=(2, 3), keepdim=True) * features).sum(dim=1))
    cam = F.interpolate(cam[:, None], size=(SIDE, SIDE), mode="bilinear", align_corners=False)[:, 0]
    expected = cam / cam.flatten(1).amax(dim=1).view(-1, 1, 1)
    mine, theirs = pair_maps(model, model.feature_module(stage), queries, references)
    assert torch.allclose(mine, expected[:2], atol=1e-5) and torch.allclose(theirs, expected[2:], atol=1e-5)
    swapped = SimilarityAttention(stage=stage)(model, references, None, queries)
    assert torch.allclose(swapped, theirs, atol=1e-5)


def test_the_default_stage_is_the_last_and_others_differ(model):
    queries, references = images(2, 0), images(2, 1)
    default = SimilarityAttention()(model, queries, None, references)
    assert torch.equal(default, SimilarityAttention(stage="final")(model, queries, None, references))
    assert not torch.allclose(default, SimilarityAttention(stage="stride2")(model, queries, None, references))


def test_an_unknown_stage_is_an_option_error_naming_the_stages(model, split, tmp_path):
    with pytest.raises(OptionError, match="stage='layer9' is not a stage") as raised:
        SimilarityAttention(stage="layer9").supports(model)
    assert "stride2, stride4, final" in raised.value.fix
    with pytest.raises(OptionError, match="stage='layer9'"):
        run(model, split, tmp_path / "out", options={"stage": "layer9"})
    assert not (tmp_path / "out").exists()
    with pytest.raises(OptionError, match="stage=''"):
        SimilarityAttention(stage="")


def test_a_model_without_feature_maps_is_refused(model):
    class Opaque:
        """An embedding model that does not name its feature maps."""

        def describe(self):
            return {"method": "opaque"}

    attribution = SimilarityAttention()
    assert not attribution.supports(Opaque())
    with pytest.raises(OptionError, match="attribution 'sam' cannot explain 'opaque'") as raised:
        check_supported("sam", attribution, Opaque())
    assert "names its feature maps" in raised.value.fix


def test_without_references_the_call_is_an_option_error(model):
    with pytest.raises(OptionError, match="reference"):
        SimilarityAttention()(model, images(1), None)


# -------------------------------------------------------------------------------------------- references
def test_references_are_nearest_classmates_and_the_nearest_of_all_when_alone():
    points = np.array([[0.0], [1.0], [3.0], [0.4], [5.0], [0.9]], dtype=np.float32)
    labels = np.array([0, 0, 0, 1, 1, 2])
    state = {"embedding": points}
    found = nearest_references(ExactL2(backend="torch"), state, labels, [0, 1, 2, 3, 4, 5])
    # 0's classmates are 1 (1.0) and 2 (3.0); 3's only classmate is 4 although 0 is nearer; 5 is alone.
    assert found == [1, 0, 1, 4, 3, 1]
    assert nearest_references(ExactL2(backend="torch"), state, labels, [5, 3]) == [1, 4]
    with pytest.raises(OptionError, match="at least two images"):
        nearest_references(ExactL2(), {"embedding": points[:1]}, labels[:1], [0])


def test_picked_references_are_the_models_nearest_classmates_every_time(model, split):
    expected = nearest_classmates(model, split)
    lines: list[str] = []
    picked = pick_references(model, split, split[::3], GEOMETRY, "bench", log=lines.append)
    assert {query: reference.id for query, reference in picked.items()} == {
        item.id: expected[item.id] for item in split[::3]
    }
    # the second time the split's state comes from the model's evaluation cache: no forward pass
    assert pick_references(model, split, split[::3], GEOMETRY, "bench", log=lines.append) == picked
    assert lines == [f"clean: embedded {len(split)} images", "clean: cached embeddings"]
    assert all(picked[item.id].label == item.label for item in split[::3])


# ------------------------------------------------------------------------------------------------ runner
@pytest.mark.parametrize("name", ["baseline", "dcml"])
def test_explain_items_records_references_and_draws_them(name, split, tmp_path):
    method = baseline() if name == "baseline" else build("dcml")
    model = MethodModel(method, torch.device("cpu"), home=tmp_path)
    result = run(model, split, tmp_path / "out")
    rows = read_csv(result.scores_csv)
    assert tuple(rows[0]) == CSV_COLUMNS + REFERENCE_COLUMNS
    expected = nearest_classmates(model, split)
    assert {row["id"]: row["reference"] for row in rows} == expected
    assert all(row["reference_label"] == row["label"] for row in rows)
    # An all-zero map (no channel with positive evidence, after Grad-CAM's ReLU) leaves a score undefined.
    scores = np.array([float(row["score"]) for row in rows if row["score"]])
    assert len(scores) >= len(rows) // 2 and np.all(np.isfinite(scores)) and np.all(scores <= 1)
    summary = result.summary
    assert summary["undefined"] == len(rows) - len(scores)
    assert summary["attribution"] == "sam" and summary["options"] == {"stage": None}
    assert summary["references"]["same_class"] == len(split) and summary["references"]["other_class"] == 0
    assert "nearest other image of its own class" in summary["references"]["rule"]
    settings = json.loads((result.out_dir / "records.jsonl").read_text().splitlines()[0])["settings"]
    assert settings["references"] == summary["references"]["rule"]
    with Image.open(result.gallery) as gallery:
        assert gallery.size[0] == 5 * (128 + 4) + 4  # image | mask | map | reference | its map
    assert len(list((result.out_dir / "reference-maps").rglob("*.png"))) == 2


def test_an_image_alone_in_its_class_takes_its_nearest_image_and_says_so(model, split, tmp_path):
    alone = split[-1]
    items = [item for item in split if item.label != alone.label] + [alone]
    rows = read_csv(run(model, items, tmp_path / "out", gallery_count=0).scores_csv)
    row = next(row for row in rows if row["id"] == alone.id)
    assert row["reference_label"] != row["label"] and row["reference"] != alone.id
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["references"]["other_class"] == 1


def test_references_come_from_the_reference_images_not_only_the_scored_ones(model, split, tmp_path):
    scored = split[::4]  # one image per class: alone among the scored images, not in the split
    rows = read_csv(run(model, scored, tmp_path / "out", reference_items=split, gallery_count=1).scores_csv)
    expected = nearest_classmates(model, split)
    assert [row["reference"] for row in rows] == [expected[item.id] for item in scored]
    with pytest.raises(OptionError, match="not among the reference images"):
        run(model, split, tmp_path / "other", reference_items=scored)


def test_a_rerun_computes_nothing_and_a_resumed_run_ends_with_the_same_files(model, split, tmp_path,
                                                                               monkeypatch):
    first = run(model, split, tmp_path / "first")
    before = {path: path.read_bytes() for path in first.out_dir.rglob("*") if path.is_file()}
    monkeypatch.setattr(SimilarityAttention, "__call__", lambda *args: pytest.fail("recomputed a map"))
    monkeypatch.setattr(split_states_module, "embed_images", lambda *args, **kw: pytest.fail("embedded"))
    run(model, split, tmp_path / "first")
    assert {path: path.read_bytes() for path in first.out_dir.rglob("*") if path.is_file()} == before
    monkeypatch.undo()

    calls = []
    original = SimilarityAttention.__call__

    def interrupted(self, model, images01, generator, references01=None):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(len(images01))
        return original(self, model, images01, generator, references01)

    monkeypatch.setattr(SimilarityAttention, "__call__", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(model, split, tmp_path / "second")
    monkeypatch.setattr(SimilarityAttention, "__call__", original)
    second = run(model, split, tmp_path / "second")
    for name in ("scores.csv", "summary.json", "records.jsonl", "gallery.png"):
        assert (second.out_dir / name).read_bytes() == (first.out_dir / name).read_bytes(), name


def test_smoothgrad_files_keep_their_columns_and_lines(model, split, tmp_path):
    result = run(model, split[:2], tmp_path / "out", attribution="smoothgrad", options={"copies": 2})
    assert (result.out_dir / "scores.csv").read_text().splitlines()[0] == ",".join(CSV_COLUMNS)
    lines = [json.loads(line) for line in (result.out_dir / "records.jsonl").read_text().splitlines()]
    assert not {"references", "reference_items_sha256"} & set(lines[0]["settings"])
    assert all("reference" not in line for line in lines[1:])
    assert "references" not in result.summary
    assert not (result.out_dir / "reference-maps").exists()


def test_extra_gallery_columns_come_after_the_overlays_and_none_changes_nothing():
    rng = np.random.default_rng(0)
    picture = rng.integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8)
    mask = rng.integers(0, 256, (SIDE, SIDE), dtype=np.uint8)
    heat = rng.random((SIDE, SIDE))
    def sheet(extra=None):
        return attribution_gallery_image([picture], [mask], {"m": [heat]}, ["caption"], extra_columns=extra)

    plain = sheet()
    assert sheet({}).tobytes() == plain.tobytes()
    assert sheet({"reference": [picture]}).size == (plain.size[0] + 128 + 4, plain.size[1])
    with pytest.raises(ValueError, match="2 pictures of reference"):
        sheet({"reference": [picture] * 2})


# --------------------------------------------------------------------------------- a run, from Python and CLI
def test_explain_picks_references_from_the_whole_split_with_a_limit(tiny_run, tmp_path):
    shutil.copytree(tiny_run, tmp_path / "run")
    trained = load_trained(tmp_path / "run", device="cpu")
    result = explain(trained, MeasureRequest(attribution="sam", limit=2, gallery_count=1, progress=False),
                     log=lambda _line: None)
    _dataset, whole = requested_split(trained, MeasureRequest())
    expected = nearest_classmates(trained, whole)
    rows = read_csv(result.scores_csv)
    assert len(rows) == 2 and [row["reference"] for row in rows] == [expected[row["id"]] for row in rows]


def test_the_command_line_explains_a_run_with_sam(tiny_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run, run_dir)
    args = ["explain", "--checkpoint", str(run_dir), "--attribution", "sam", "--limit", "3", "--gallery", "2",
            "--device", "cpu", "--no-progress"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    (folder,) = [path for path in (run_dir / "explain").iterdir() if path.is_dir()]  # beside it: its lock
    assert folder.name.endswith("-test-sam")
    names = {path.name for path in folder.iterdir()}
    assert {"scores.csv", "summary.json", "gallery.png", "records.jsonl"} <= names
    assert json.loads((folder / "summary.json").read_text())["images"] == 3
    bad = CliRunner().invoke(main, [*args, "--attribution-option", "stage=nowhere"])
    assert bad.exit_code == 2 and "stage='nowhere' is not a stage" in bad.output
    assert "stride2, stride4, final" in bad.output
