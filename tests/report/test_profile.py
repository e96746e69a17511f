"""The background-reliance profile on tiny data whose answer is known: a model that sees only the object and
one that sees only the background (each a fixed function of a fixed image region), and their profiles."""

from __future__ import annotations

import csv
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from bgbias.data.registry import open_dataset
from bgbias.data.splits import split_items
from bgbias.engine.trained import load_trained
from bgbias.measurement.request import MeasureRequest
from bgbias.models.input_convention import IMAGENET
from bgbias.report.evaluate import evaluate
from bgbias.report.evaluation import load_evaluation_report
from bgbias.report.per_query import read_per_query
from bgbias.report.runs_table import profile_table, write_runs_report
from bgbias.retrieval.metrics import chance_scores, score_embeddings
from bgbias.retrieval.retrievers import ExactL2, LearnedDistance
from bgbias.retrieval.search import squared_l2
from bgbias.variants.variant_manifests import load_variant_manifest
from tests.replicas import copy_ground_truth_masks

CLASSES, PER_CLASS, SIDE = 4, 4, 32
BOX = (8, 24)
"""The object's rows and columns (a square, 8 to 23) in every 32-px image; the bench is evaluated at 128 px,
where it covers rows and columns 32–95."""
CENTRE, BORDER = (slice(48, 80), slice(48, 80)), (slice(0, 16), slice(0, 128))
"""What each model sees at 128 px: the middle of the object, and a strip of pure background."""


def _object_colour(label: int) -> tuple[int, int, int]:
    return (60 + 40 * label, 0, 0)  # the class is in the red channel of the object


def _background_colour(label: int) -> tuple[int, int, int]:
    return (0, 0, 60 + 40 * label)  # and in the blue channel of the background: rho = 1


@pytest.fixture(scope="module")
def profile_bench(tmp_path_factory) -> Path:
    """A bench of 4 test classes × 4 images (and a train and a val class): the object of class c red
    60 + 40c, its background blue 60 + 40c, both exact; a test pool of noise without blue."""
    base = tmp_path_factory.mktemp("profile-bench")
    root = base / "bench"
    rows = []
    for label, split in enumerate(["train", "val"] + ["test"] * CLASSES):
        test_label = max(label - 2, 0)
        for k in range(PER_CLASS):
            image = Image.new("RGB", (SIDE, SIDE), _background_colour(test_label))
            image.paste(_object_colour(test_label), (BOX[0], BOX[0], BOX[1], BOX[1]))
            mask = Image.new("L", (SIDE, SIDE), 0)
            mask.paste(255, (BOX[0], BOX[0], BOX[1], BOX[1]))
            name = f"c{label}/{k}.png"
            for folder, picture in (("images", image), ("masks", mask)):
                (root / folder / name).parent.mkdir(parents=True, exist_ok=True)
                picture.save(root / folder / name)
            rows.append([f"images/{name}", str(label), f"c{label}", split, f"masks/{name}"])
    with (root / "index.csv").open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["image", "label", "class_name", "split", "ground_truth_mask"])
        writer.writerows(rows)
    (root / "bench.json").write_text(json.dumps({"classes": CLASSES + 2, "images": len(rows)}))
    copy_ground_truth_masks(open_dataset("bench", root).items(), base / "saliency")
    rng = np.random.default_rng(0)
    (base / "backgrounds" / "test").mkdir(parents=True)
    for index in range(5):
        noise = rng.integers(0, 256, (40, 56, 3), dtype=np.uint8)
        noise[..., 2] = 0  # no blue: the background model sees nothing in a replaced background
        Image.fromarray(noise).save(base / "backgrounds" / "test" / f"bg{index}.png")
    return base


@dataclass
class RegionModel:
    """A fixed embedding: the mean of one colour channel over one region of the image, so it sees only what
    lies there. ``learned`` ranks by its squared L2 as a learned pairwise distance instead of faiss."""

    name: str
    channel: int
    region: tuple[slice, slice]
    home: Path
    learned: bool = False
    device = torch.device("cpu")
    amp = None
    convention = IMAGENET

    def eval(self) -> RegionModel:
        return self

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        return images[:, self.channel, self.region[0], self.region[1]].mean(dim=(1, 2))[:, None]

    def pairwise_distance(self, queries: torch.Tensor, references: torch.Tensor) -> torch.Tensor:
        return squared_l2(queries, references)

    def retrieval(self):
        return LearnedDistance(self.pairwise_distance) if self.learned else ExactL2()

    def fingerprint(self) -> str:
        return f"region-{self.name}-{self.channel}"

    def describe(self) -> dict:
        return {"method": self.name, "bgaugment": False}

    def trained_on(self):
        return None


def _profile(model, base, tmp_path, **options):
    settings = dict(dataset="bench", root=base / "bench", masks=base / "saliency",
                    backgrounds=base / "backgrounds", manifests=tmp_path / "manifests", profile=True,
                    repeats=2, worst_k=3, workers=0, progress=False)
    return evaluate(model, MeasureRequest(**{**settings, **options}), log=lambda _: None)


def _header(folder: Path) -> list[str]:
    return (folder / "per_query.csv").read_text().splitlines()[0].split(",")


def _maps(report) -> dict[str, float]:
    return {row.set: row.mean.map_at_r for row in report.profile.sets}


def _labels(base) -> np.ndarray:
    return np.array([item.label for item in split_items(open_dataset("bench", base / "bench"), "test")])


def _seeing_nothing(labels) -> float:
    """MAP@R of a model whose embedding is the same for every image (how faiss orders the ties)."""
    return score_embeddings(np.zeros((len(labels), 1), np.float32), labels).map_at_r


@pytest.mark.slow
def test_a_model_that_sees_only_the_object_keeps_everything_but_the_object_removed(profile_bench, tmp_path):
    result = _profile(RegionModel("object-only", 0, CENTRE, tmp_path / "fg"), profile_bench, tmp_path)
    got, nothing = _maps(result.report), _seeing_nothing(_labels(profile_bench))
    for name in ("clean", "repasted", "random-bg", "query-side", "worst-case", "only-fg", "mixed-same",
                 "mixed-rand"):
        assert got[name] == pytest.approx(1.0), name
    assert got["only-bg-tiled"] == got["only-bg-black"] == got["only-bg-inpainted"] == pytest.approx(nothing)
    assert got["bg-gap"] == pytest.approx(0.0)
    parts = result.report.profile.decomposition["map_at_r"]
    for part in (parts.drop, parts.paste_cost, parts.background_effect):
        assert (part.difference.low, part.difference.high, part.p_value) == (0.0, 0.0, 1.0)
    assert parts.paste_share is None  # nothing dropped: no share of it


@pytest.mark.slow
def test_a_model_that_sees_only_the_background_has_the_profile_of_pure_background_reliance(profile_bench,
                                                                                          tmp_path):
    result = _profile(RegionModel("background-only", 2, BORDER, tmp_path / "bg"), profile_bench, tmp_path)
    got, labels = _maps(result.report), _labels(profile_bench)
    nothing = _seeing_nothing(labels)
    for name in ("clean", "repasted", "only-bg-tiled", "only-bg-black", "only-bg-inpainted", "mixed-same"):
        assert got[name] == pytest.approx(1.0), name
    assert got["random-bg"] == got["only-fg"] == pytest.approx(nothing)
    # The strip it reads lies far from the object: the paste leaves it as it was, the new background does not.
    parts = result.report.profile.decomposition["map_at_r"]
    assert parts.paste_cost.difference.estimate == 0.0 and parts.paste_cost.p_value == 1.0
    assert parts.background_effect.difference.estimate == pytest.approx(1.0 - nothing)
    assert parts.background_effect.difference.low > 0 and parts.background_share == pytest.approx(1.0)
    assert parts.background_effect_per_draw.draws == 2
    # Every corrupted query looks the same; the clean gallery ranks the class with the least blue first, so
    # only that class's queries find their class: 1 in 4, in every repeat and so in the worst case too.
    assert got["query-side"] == got["worst-case"] == pytest.approx(1 / CLASSES)
    # mixed-rand: each image shows its donor's background, so it scores as the donors' colours would.
    dataset = open_dataset("bench", profile_bench / "bench")
    label_of = {item.id: item.label for item in split_items(dataset, "test")}
    expected = []
    for repeat in range(2):
        path = tmp_path / "manifests" / "mixed-rand" / f"repeat-{repeat}.json"
        manifest = load_variant_manifest(path, dataset)
        shown = np.array([[_background_colour(label_of[e.donor] - 2)[2] / 255] for e in manifest.entries])
        expected.append(score_embeddings(shown.astype(np.float32), labels).map_at_r)
    assert got["mixed-rand"] == pytest.approx(np.mean(expected))
    assert got["bg-gap"] == pytest.approx(1.0 - np.mean(expected)) and got["bg-gap"] > 0.5
    assert got["chance"] == pytest.approx(chance_scores(labels)["map_at_r"])


@pytest.mark.slow
def test_the_profile_report_its_files_and_a_rerun_that_embeds_nothing(profile_bench, tmp_path):
    model = RegionModel("background-only", 2, BORDER, tmp_path / "bg")
    first = _profile(model, profile_bench, tmp_path)
    sets = {row.set: row for row in first.report.profile.sets}
    assert list(sets) == ["clean", "repasted", "random-bg", "query-side", "worst-case", "only-fg",
                          "only-bg-tiled", "only-bg-black", "only-bg-inpainted", "mixed-same", "mixed-rand",
                          "bg-gap", "chance"]
    counted = ("repasted", "random-bg", "query-side", "worst-case", "only-fg", "mixed-rand")
    assert [sets[name].repeats for name in counted] == [1, 2, 2, 3, 1, 2]
    # clean, 3 random-background repeats (the worst case's third beyond the paper's 2), 5 fixed variants and
    # 2 repeats of each mixed variant
    assert first.embedded == 1 + 3 + 5 + 4
    assert len(first.report.corrupted.repeats) == 2
    page = first.files["report_md"].read_text()
    assert "## Background-reliance profile (%)" in page
    assert "## Paste cost and background effect (MAP@R, points)" in page
    assert "| paste cost (clean − repasted) | 0.00 | \\[0.00, 0.00\\] | 1.000 | 0 % |" in page
    record = json.loads(first.files["report_json"].read_text())
    saved = record["profile"]
    assert set(saved["decomposition"]) == {"map_at_r", "r_precision", "precision_at_1"}
    for metric, parts in saved["decomposition"].items():  # the headline's drop, handed over as it is
        assert parts["drop"] == record["confidence"]["drop"][metric]
    assert [row["set"] for row in saved["manifests"]].count("repasted") == 1
    for name in ("profile", "profile_csv"):
        assert first.files[name].is_file()
    # per_query.csv holds every variant set's draws, read back as they were scored (and as per_query() gives)
    read = read_per_query(first.out_dir)
    assert {name: len(draws) for name, draws in first.variants.items()} == {
        name: len(metrics["map_at_r"]) for name, metrics in read.variants.items()}
    assert {name: len(draws) for name, draws in first.variants.items()}["mixed-rand"] == 2
    for name, draws in first.variants.items():
        np.testing.assert_allclose(read.variants[name]["map_at_r"],
                                   [draw.per_query["map_at_r"] for draw in draws])
    written = _header(first.out_dir)
    assert list(first.per_query())[3:] == written[written.index("clean_map_at_r"):]
    assert written.index("repasted0_map_at_r") == written.index("repeat1_precision_at_1") + 1
    again = _profile(model, profile_bench, tmp_path)
    assert again.embedded == 0
    assert {n: p.read_bytes() for n, p in again.files.items()} == {
        n: p.read_bytes() for n, p in first.files.items()}
    assert load_evaluation_report(first.files["report_json"]) == again.report
    plain = evaluate(model, MeasureRequest(dataset="bench", root=profile_bench / "bench",
                                           masks=profile_bench / "saliency", corrupted=True, repeats=2,
                                           backgrounds=profile_bench / "backgrounds",
                                           manifests=tmp_path / "manifests", workers=0, progress=False),
                     log=lambda _: None)
    assert plain.embedded == 0 and plain.report.profile is None
    assert _header(plain.out_dir)[-1] == "repeat1_precision_at_1"
    assert read_per_query(plain.out_dir).variants == {}
    assert not (plain.out_dir / "profile.png").exists() and not (plain.out_dir / "profile.csv").exists()


@pytest.mark.slow
def test_the_runs_report_has_one_profile_row_per_model_and_a_dash_for_a_set_an_older_one_lacks(
    profile_bench, tmp_path
):
    from bgbias.report.document import to_markdown
    from bgbias.report.evaluation import evaluation_blocks
    from bgbias.report.plots import plot_profile

    results = [_profile(RegionModel(name, channel, region, tmp_path / name), profile_bench, tmp_path)
               for name, channel, region in (("object-only", 0, CENTRE), ("background-only", 2, BORDER))]
    # A record of before the only-bg-inpainted variant: the same but for that row (and its model's name).
    record = json.loads(results[1].files["report_json"].read_text())
    record["method"] = "older"
    sets = record["profile"]["sets"]
    record["profile"]["sets"] = [row for row in sets if row["set"] not in ("only-bg-inpainted", "repasted")]
    del record["profile"]["decomposition"]
    older = tmp_path / "older" / "report.json"
    older.parent.mkdir()
    older.write_text(json.dumps(record))
    reports = [*(load_evaluation_report(result.files["report_json"]) for result in results),
               load_evaluation_report(older)]
    headers, rows = profile_table(reports)
    assert headers[:3] == ["method", "measured on", "clean"] and "bg-gap" in headers
    assert [row[0] for row in rows] == ["object-only", "background-only", "older"]
    gap, inpainted, tiled = (headers.index(name) for name in ("bg-gap", "only-bg-inpainted", "only-bg-tiled"))
    assert rows[0][gap] == "0.00 ± 0.00" and float(rows[1][gap].split()[0]) > 50
    assert rows[1][inpainted] == "100.00" and rows[2][inpainted] == "–" and rows[2][tiled] == rows[1][tiled]
    files = write_runs_report(reports, None, tmp_path / "report")
    assert "Background-reliance profile" in files["table_md"].read_text()
    csv_rows = files["profile_csv"].read_text().splitlines()
    assert csv_rows[0].startswith("method,measured on,clean") and ",–," in csv_rows[3]
    page = to_markdown(evaluation_blocks(reports[2]), tmp_path)
    assert "| only-bg, tiled |" in page and "only-bg, inpainted" not in page
    assert "Paste cost" not in page  # a record of before the paste control: no decomposition to show
    older_first, _ = profile_table([reports[2], reports[0]])
    assert older_first[2:5] == ["clean", "repasted", "random-bg"]  # the profile's order, not first seen
    assert plot_profile(reports[2], tmp_path / "older.png").is_file()


@pytest.mark.slow
def test_query_side_ranks_by_a_learned_distance_as_the_exact_search_does(tiny_run, tiny_bench, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    trained = load_trained(run, device="cpu")
    request = dict(masks=tiny_bench / "masks", backgrounds=tiny_bench / "backgrounds",
                   manifests=tmp_path / "manifests", profile=True, repeats=2, worst_k=2, workers=0,
                   progress=False)
    exact = _maps(evaluate(trained, MeasureRequest(**request), log=lambda _: None).report)
    trained.method.retrieval = lambda: LearnedDistance(trained.method.pairwise_distance)
    learned = _maps(evaluate(trained, MeasureRequest(**request), log=lambda _: None).report)
    for name in ("query-side", "worst-case", "mixed-rand"):
        assert learned[name] == pytest.approx(exact[name]), name


def test_a_worst_case_of_no_background_is_refused_before_any_work(profile_bench, tmp_path):
    from bgbias.errors import OptionError

    with pytest.raises(OptionError, match="worst_k=1 or more"):
        _profile(RegionModel("object-only", 0, CENTRE, tmp_path / "fg"), profile_bench, tmp_path, worst_k=0)
    assert not (tmp_path / "manifests").exists()
