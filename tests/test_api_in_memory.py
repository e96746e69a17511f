"""bgbias.evaluate on one's own images (rows, columns, a torch Dataset), with results in memory: nothing is
written anywhere unless out= names a folder."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision  # noqa: F401  (importing it makes torch's compile cache folder in the temp folder: not ours)
from PIL import Image

import bgbias
from bgbias.data.images import load_image, load_mask
from bgbias.data.registry import open_dataset
from bgbias.errors import ModelError, OptionError
from bgbias.models.model_input import ModelInput
from tests.engine.external import tiny_embedder
from tests.replicas import copy_ground_truth_masks, make_bench


@pytest.fixture(scope="module")
def forty(tmp_path_factory) -> tuple[Path, list[tuple[str, int, str]]]:
    """40 images of 10 classes with their masks, as rows (path, label, mask), and background pools."""
    base = tmp_path_factory.mktemp("forty")
    root = make_bench(base / "bench", train_classes=4, val_classes=2, test_classes=4, per_class=4)
    items = open_dataset("bench", root).items()
    copy_ground_truth_masks(items, base / "masks")
    rng = np.random.default_rng(0)
    for pool_name in ("train", "test"):
        (base / "backgrounds" / pool_name).mkdir(parents=True)
        for i in range(6):
            pixels = rng.integers(0, 256, (40 + 4 * i, 56, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(base / "backgrounds" / pool_name / f"bg{i}.png")
    rows = [(str(item.image), item.label, str(base / "masks" / Path(item.id).with_suffix(".png")))
            for item in items]
    assert len(rows) == 40
    return base, rows


def _tree(folder: Path) -> dict[str, int]:
    return {str(path): path.stat().st_mtime_ns for path in folder.rglob("*")}


SMALL = ModelInput(input_size=32)
"""The bench images' own size: variants rendered and embedded at 32 px, not the default 227 (8× faster)."""


def _score(data, base: Path, **options):
    return bgbias.evaluate(tiny_embedder().eval(), data, split="all", backgrounds=base / "backgrounds",
                           repeats=2, workers=0, device="cpu", **{"model_input": SMALL, **options})


@pytest.mark.slow
def test_forty_files_with_masks_are_scored_with_no_file_written_and_out_writes_the_report(
        forty, tmp_path, monkeypatch):
    base, rows = forty
    for name in ("cwd", "home", "temp"):
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("BGBIAS_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "temp"))
    before = {**_tree(tmp_path), **_tree(base)}

    result = _score(rows, base, profile=True, worst_k=2)
    assert {**_tree(tmp_path), **_tree(base)} == before  # nothing written, nothing touched
    assert result.out_dir is None and result.files == {}
    report = result.report
    assert report.dataset == "table" and report.split == "all" and len(report.corrupted.repeats) == 2
    assert len(result.clean.per_query["map_at_r"]) == 40  # every image a query
    assert report.profile is not None and report.per_class
    assert report.profile.decomposition["map_at_r"].paste_cost.queries == 40  # the paste control, in memory
    table = result.per_query()
    assert table["id"][0] == "stamp_000/0.jpg" and len(table["repeat1_map_at_r"]) == 40
    assert "report:" not in result.summary()

    again = _score(rows, base)  # a second call in the loop: the same manifests, from memory
    assert again.report.corrupted.mean == report.corrupted.mean and again.out_dir is None
    assert {**_tree(tmp_path), **_tree(base)} == before

    written = _score(rows, base, out=tmp_path / "out")
    assert written.report.clean == report.clean
    assert (written.out_dir / "report.json").is_file() and written.out_dir.is_relative_to(tmp_path / "out")
    assert os.listdir(tmp_path / "cwd") == [] and os.listdir(tmp_path / "temp") == []


@pytest.mark.slow
def test_columns_and_a_torch_dataset_of_the_same_images_give_the_same_scores(forty):
    base, rows = forty
    by_rows = _score(rows, base).report
    columns = {"path": [r[0] for r in rows], "label": [f"class-{r[1]:02d}" for r in rows],
               "mask": [r[2] for r in rows]}
    by_columns = _score(columns, base).report
    assert (by_columns.clean, by_columns.corrupted.mean) == (by_rows.clean, by_rows.corrupted.mean)

    class Samples(torch.utils.data.Dataset):
        """Decoded pixels, tensors and PIL masks: as a user's own Dataset hands them over."""

        def __len__(self) -> int:
            return len(rows)

        def __getitem__(self, i: int):
            image = torch.from_numpy(np.array(load_image(rows[i][0]))).permute(2, 0, 1)
            return image, torch.tensor(rows[i][1]), load_mask(rows[i][2])

    by_samples = _score(Samples(), base).report
    assert by_samples.clean == by_rows.clean
    # Sample ids are their positions, and an image's backgrounds are drawn by its id: other draws.
    assert by_samples.images_hurt_most[0].id.isdigit() and len(by_samples.corrupted.repeats) == 2


@pytest.mark.slow
def test_a_pandas_frame_is_a_table(forty):
    pandas = pytest.importorskip("pandas")
    base, rows = forty
    frame = pandas.DataFrame(rows, columns=["path", "label", "mask"])
    by_frame = _score(frame, base, corrupted=False).report
    assert by_frame.clean == _score(rows, base, corrupted=False).report.clean


def test_masks_from_a_folder_stand_in_for_masks_in_the_rows(forty):
    base, rows = forty
    with_masks = _score(rows, base).report
    from_folder = _score([row[:2] for row in rows], base, masks=base / "masks" / "images", root="/").report
    assert from_folder.corrupted.mean == with_masks.corrupted.mean


@pytest.mark.parametrize(("data", "words"), [
    ([("a.jpg",)], "row 0 is"),
    ([(Path("a.jpg"), 1, 3)], "row 0's mask is a int"),
    ({"file": ["a.jpg"], "label": [0]}, "it needs path or image and label"),
    ({"path": ["a.jpg", "b.jpg"], "label": [0]}, "differ in length"),
    (Path("images"), 'pass dataset="folder", root='),
    (42, "cannot read images from a int"),
])
def test_data_that_is_no_table_is_refused_in_python_words(data, words, forty):
    with pytest.raises(OptionError, match=words.replace("(", r"\(")):
        _score(data, forty[0])


def test_a_missing_image_of_a_row_is_named(forty, tmp_path):
    base, rows = forty
    with pytest.raises(Exception, match="missing") as raised:
        _score([*rows, (str(tmp_path / "gone.jpg"), 0, rows[0][2])], base)
    assert "gone.jpg" in str(raised.value)


@pytest.mark.slow
def test_u2net_masks_are_made_on_the_fly_once_and_kept_in_memory(forty, tmp_path, monkeypatch):
    from bgbias.saliency import on_the_fly
    from tests.u2netp import provide_u2netp

    monkeypatch.setenv("U2NET_HOME", str(provide_u2netp(tmp_path / "home").parent))
    base, rows = forty
    before = _tree(base)
    kept = len(on_the_fly._KEPT)
    result = _score([row[:2] for row in rows[:12]], base, masks=bgbias.U2NetMasks("u2netp"), root="/")
    assert len(on_the_fly._KEPT) == kept + 12 and len(result.corrupted) == 2
    again = _score([row[:2] for row in rows[:12]], base, masks=bgbias.U2NetMasks("u2netp"), root="/")
    assert len(on_the_fly._KEPT) == kept + 12 and again.report.corrupted.mean == result.report.corrupted.mean
    assert _tree(base) == before
    with pytest.raises(OptionError, match="not for the bench dataset"):
        _score("bench", base, masks=bgbias.U2NetMasks("u2netp"), root=base / "bench")


def test_explain_keeps_maps_and_scores_in_memory_and_writes_only_into_out(forty, tmp_path, monkeypatch):
    base, rows = forty
    monkeypatch.chdir(tmp_path)
    before = {**_tree(tmp_path), **_tree(base)}
    explained = bgbias.explain(tiny_embedder().eval(), rows, split="all", limit=5, device="cpu",
                               attribution_options={"copies": 2}, model_input=SMALL)
    assert {**_tree(tmp_path), **_tree(base)} == before
    assert explained.out_dir is None and len(explained.scores) == 5 and len(explained.maps) == 5
    first = explained.scores[0]
    assert first.mask_source == "saliency" and explained.maps[first.id].shape == (32, 32)  # the model's crop
    assert explained.summary["scored"] == 5
    written = bgbias.explain(tiny_embedder().eval(), rows, split="all", limit=5, device="cpu",
                             attribution_options={"copies": 2}, model_input=SMALL, out=tmp_path / "out")
    assert [score.score for score in written.scores] == [score.score for score in explained.scores]
    assert (written.out_dir / "summary.json").is_file() and written.out_dir.is_relative_to(tmp_path / "out")
    with pytest.raises(OptionError, match="attribution 'smoothgrad' has no option 'samples'"):
        bgbias.explain(tiny_embedder().eval(), rows, attribution_options={"samples": 2})


def test_errors_from_below_carry_their_parameter_and_read_in_python_words(forty):

    _, rows = forty
    with pytest.raises(ModelError) as raised:
        bgbias.evaluate(tiny_embedder().eval(), rows, model_input=ModelInput(output_key="emb"),
                        corrupted=False, workers=0, device="cpu")
    assert raised.value.parameter == "output_key"
    assert raised.value.problem.startswith("output_key='emb' given, but ")
    assert raised.value.fix == "leave out output_key=" and "--" not in str(raised.value)
    with pytest.raises(OptionError, match=r"fix:  name the dataset \(dataset=, and its folder") as raised:
        bgbias.evaluate(tiny_embedder().eval())
    assert raised.value.parameter == "dataset"


def test_the_command_line_words_the_parameter_as_its_option_and_keeps_quoted_commands():
    import pickle

    from bgbias.errors import PARAMETER, DatasetError, given

    error = DatasetError(f"{given(2048)} is too small for {PARAMETER}", path="x", parameter="max_memory",
                         fix=f"pass {given(4096)}, or {given(True)}; then run `bgbias masks --dataset cub`")
    assert error.problem == "max_memory=2048 is too small for max_memory="
    assert error.fix == "pass max_memory=4096, or max_memory=True; then run `bgbias masks --dataset cub`"
    assert error.render({}) == ("--max-memory 2048 is too small for --max-memory\n  file: x\n  fix:  pass "
                                "--max-memory 4096, or --max-memory; then run `bgbias masks --dataset cub`")
    assert error.render({"max_memory": "--ceiling"}).startswith("--ceiling 2048 is too small")
    again = pickle.loads(pickle.dumps(error))
    assert (again.parameter, again.problem, again.fix, again.path) == (
        error.parameter, error.problem, error.fix, error.path)


def test_a_value_is_worded_as_given_whatever_its_first_character():
    from bgbias.errors import OptionError, given

    error = OptionError(f"{given('/data/cub')} and {given('.5')} and {given(repr('a}b'))} are wrong",
                        parameter="out")
    assert error.problem == "out=/data/cub and out=.5 and out='a}b' are wrong"
    assert error.render({}) == "--out /data/cub and --out .5 and --out 'a}b' are wrong"


def test_a_command_reports_an_error_from_below_with_its_option(tmp_path):
    from click.testing import CliRunner

    from bgbias.cli import main

    models = tmp_path / "models.txt"
    models.write_text("A = os:system command=x\n")
    result = CliRunner().invoke(main, ["audit", "--dataset", "bench", "--models", str(models)])
    assert result.exit_code == 2 and "fix:  pass --trust-model if you wrote this file" in result.output
    assert "trust_model" not in result.output


def test_a_first_evaluation_in_a_new_folder_without_installed_photos_names_the_fetch_command(
        forty, tmp_path, monkeypatch):
    import bgbias.backgrounds.pool
    from bgbias.errors import AssetError

    _, rows = forty
    monkeypatch.setattr(bgbias.backgrounds.pool, "background_sources", lambda: [])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AssetError, match="no background photographs are installed") as raised:
        bgbias.evaluate(tiny_embedder().eval(), rows, split="all", repeats=1, workers=0, device="cpu")
    assert "`bgbias assets fetch`" in raised.value.fix and "pass backgrounds=" in raised.value.fix


def test_an_outside_model_on_ones_own_images_scores_every_image_by_default_and_says_why(forty):
    from bgbias.report.evaluation import format_evaluation_markdown

    _, rows = forty
    chosen = bgbias.evaluate(tiny_embedder().eval(), rows, corrupted=False, workers=0, device="cpu")
    assert chosen.report.split == "all" and len(chosen.clean.per_query["map_at_r"]) == len(rows)
    assert "did not train" in chosen.report.split_reason
    assert f"Split scored: {chosen.report.split_reason}." in format_evaluation_markdown(chosen.report)
    asked = bgbias.evaluate(tiny_embedder().eval(), rows, split="test", corrupted=False, workers=0,
                            device="cpu")
    assert asked.report.split == "test" and asked.report.split_reason == "test, as asked"
    assert len(asked.clean.per_query["map_at_r"]) < len(rows)


@pytest.mark.slow
def test_corrupted_sets_of_ones_own_rows_are_made_where_asked(forty, tmp_path):
    base, rows = forty
    made = bgbias.make_corrupted_sets(rows, split="all", repeats=2, backgrounds=base / "backgrounds",
                                      out=tmp_path / "sets")
    assert [path.name for path in made["random-bg"]] == ["repeat-0.json", "repeat-1.json"]
    assert made["random-bg"][0].parent == tmp_path / "sets"
    # The very manifests an in-memory evaluation of the rows makes, so their scores agree (at the default
    # geometry, the one make_corrupted_sets makes them for).
    on_disk = _score(rows, base, manifests=tmp_path / "sets", model_input=ModelInput()).report
    assert on_disk.corrupted.mean == _score(rows, base, model_input=ModelInput()).report.corrupted.mean


@pytest.mark.slow
def test_bgbias_eval_reads_the_same_rows_from_a_csv(forty, tmp_path):
    from click.testing import CliRunner

    from bgbias.cli import main

    base, rows = forty
    table = tmp_path / "images.csv"
    lines = "".join(f"{image},{label},{mask}\n" for image, label, mask in rows)
    table.write_text(f"path,label,mask\n{lines}")
    result = CliRunner().invoke(main, [
        "eval", "--model", "tests.engine.external:tiny_embedder", "--dataset", "table", "--root", str(table),
        "--split", "all", "--corrupted", "--repeats", "2", "--input-size", "32",
        "--backgrounds", str(base / "backgrounds"), "--manifests", str(tmp_path / "sets"),
        "--out", str(tmp_path / "out"), "--device", "cpu", "--workers", "0"])
    assert result.exit_code == 0, result.output
    written = json.loads(next((tmp_path / "out" / "eval").glob("table-*-all/report.json")).read_text())
    in_python = _score(rows, base, manifests=tmp_path / "sets").report
    assert written["clean"]["map_at_r"] == in_python.clean.map_at_r
    assert written["corrupted"]["mean"]["map_at_r"] == in_python.corrupted.mean.map_at_r


@pytest.mark.cuda
def test_an_in_memory_audit_on_cuda_scores_as_on_the_cpu(forty):
    base, rows = forty
    on_cpu = _score(rows, base).report
    on_cuda = bgbias.evaluate(tiny_embedder().eval().cuda(), rows, split="all", repeats=2, workers=0,
                              backgrounds=base / "backgrounds", amp="off")
    assert on_cuda.out_dir is None and on_cuda.report.compute["device"].startswith("cuda")
    assert on_cuda.report.clean.map_at_r == pytest.approx(on_cpu.clean.map_at_r, abs=1e-3)
    explained = bgbias.explain(tiny_embedder().eval().cuda(), rows, split="all", limit=3,
                               attribution_options={"copies": 2})
    assert len(explained.maps) == 3 and explained.summary["compute"]["device"].startswith("cuda")


def test_the_trials_folder_with_ones_own_masks_is_still_scored_in_one_call(forty, tmp_path):
    from tests.replicas import make_folder

    root = make_folder(tmp_path / "products", per_class=2)
    for image in sorted(root.glob("*/*")):  # a centred box as each image's mask, as a user might bring
        width, height = Image.open(image).size
        mask = np.zeros((height, width), dtype=np.uint8)
        mask[height // 4: 3 * height // 4, width // 4: 3 * width // 4] = 255
        (tmp_path / "masks" / image.parent.name).mkdir(parents=True, exist_ok=True)
        Image.fromarray(mask).save(tmp_path / "masks" / image.parent.name / f"{image.stem}.png")
    before = _tree(tmp_path)
    result = bgbias.evaluate(tiny_embedder().eval(), "folder", root=root, masks=tmp_path / "masks",
                             backgrounds=forty[0] / "backgrounds", repeats=2, workers=0, device="cpu")
    assert result.report.images == 16 and len(result.corrupted) == 2 and _tree(tmp_path) == before
