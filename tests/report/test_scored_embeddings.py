"""`bgbias score --embeddings` and `bgbias.score`: one's own embeddings of the rendered sets, scored as
`bgbias eval` scores a model's, and the layout's checks (docs/embeddings.md)."""

from __future__ import annotations

import io
import json
import math
import shutil
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import bgbias
from bgbias.cli import main
from bgbias.data.registry import open_dataset
from bgbias.data.splits import split_items
from bgbias.errors import AssetError, OptionError
from tests.data.test_array_files import forged_npy

SOURCE_FIELDS = {"method", "bgaugment", "run", "seed", "trained_on", "checkpoint", "compute",
                 "same_dataset_as_training", "embeddings", "split_reason"}
"""The report fields that name where the numbers came from: the model and how it ran (eval), the files
(score), and why that split (the model's default, the files' split). Every other field of the two reports is
equal."""


def layout_id(relpath: Path | str) -> str:
    """An image's id in the layout, as a user derives it from a file name without bgbias: the path without
    its suffix."""
    return Path(relpath).with_suffix("").as_posix()


def export_cached_states(run: Path, report: dict, ids: list[str], out: Path) -> list[str]:
    """Write every state a run's evaluation cache holds as the layout's files, each set named by the
    manifest its report records for it; rows shuffled, every other set as .npy with .ids.txt. Returns the
    set names written."""
    names = {m["sha256"]: f"repeat-{m['repeat']}" for m in report["corrupted_sets"]["manifests"]}
    for m in report["profile"]["manifests"]:
        stem = f"repeat-{m['repeat']}"
        names[m["sha256"]] = stem if m["set"] == "random-bg" else f"{m['set']}/{stem}"
    rng = np.random.default_rng(0)
    written = []
    for index, path in enumerate(sorted((run / "eval" / "cache").glob("*.npz"))):
        with np.load(path) as stored:
            key = json.loads(str(stored["key"]))
            state = stored["state.embedding"]
        name = "clean" if key["set"] == "clean" else names[key["manifest_sha256"]]
        order = rng.permutation(len(ids))
        write_set(out, name, [ids[i] for i in order], state[order], npy=index % 2 == 1)
        written.append(name)
    return sorted(written)


def write_set(out: Path, name: str, ids: list[str], embeddings: np.ndarray, npy: bool = False) -> None:
    target = out / name
    target.parent.mkdir(parents=True, exist_ok=True)
    if npy:
        np.save(target.with_name(target.name + ".npy"), embeddings)
        target.with_name(target.name + ".ids.txt").write_text("".join(f"{i}\n" for i in ids))
    else:
        np.savez(target.with_name(target.name + ".npz"), ids=np.array(ids), embeddings=embeddings)


def differences(a, b, where: str = "") -> list[str]:
    """Where two JSON values differ: numbers by more than 1e-9, anything else at all."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for key in sorted(set(a) | set(b))
                for d in (differences(a.get(key), b.get(key), f"{where}.{key}") if key in a and key in b
                          else [f"{where}.{key}: only in one"])]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} vs {len(b)} entries"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in differences(x, y, f"{where}[{i}]")]
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool):
        return [] if math.isclose(a, b, rel_tol=0, abs_tol=1e-9) else [f"{where}: {a} vs {b}"]
    return [] if a == b else [f"{where}: {a!r} vs {b!r}"]


@pytest.mark.slow
def test_score_of_a_runs_cached_states_reproduces_its_eval_profile_report(tiny_run, tiny_bench, tmp_path):
    run = tmp_path / "runs" / "run"
    shutil.copytree(tiny_run, run)
    sets = ["--root", str(tiny_bench / "bench"), "--repeats", "2", "--masks", str(tiny_bench / "masks"),
            "--backgrounds", str(tiny_bench / "backgrounds"), "--manifests", str(tmp_path / "manifests")]
    evaluated = CliRunner().invoke(main, ["eval", "--checkpoint", str(run), *sets, "--profile", "--worst-k",
                                          "3", "--workers", "0", "--device", "cpu", "--no-progress"])
    assert evaluated.exit_code == 0, evaluated.output
    [eval_dir] = [path.parent for path in (run / "eval").glob("*/report.json")]
    expected = json.loads((eval_dir / "report.json").read_text())
    items = split_items(open_dataset("bench", tiny_bench / "bench"), "test")
    ids = [layout_id(item.relpath) for item in items]
    written = export_cached_states(run, expected, ids, tmp_path / "embeddings")
    assert written == sorted(["clean", "repeat-0", "repeat-1", "repeat-2", "repasted/repeat-0",
                              "only-fg/repeat-0", "only-bg-tiled/repeat-0", "only-bg-black/repeat-0",
                              "only-bg-inpainted/repeat-0", "mixed-same/repeat-0", "mixed-same/repeat-1",
                              "mixed-rand/repeat-0", "mixed-rand/repeat-1"])

    scored = CliRunner().invoke(main, ["score", "--embeddings", str(tmp_path / "embeddings"), "--dataset",
                                       "bench", *sets, "--profile", "--worst-k", "3", "--out",
                                       str(tmp_path / "out")])
    assert scored.exit_code == 0, scored.output
    assert "profile set" in scored.output and "bg-gap" in scored.output
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    same = {key: value for key, value in report.items() if key not in SOURCE_FIELDS}
    assert differences({k: v for k, v in expected.items() if k not in SOURCE_FIELDS}, same) == []
    assert {key for key in set(report) ^ set(expected)} <= SOURCE_FIELDS
    files = report["embeddings"]["files"]
    assert sorted({f["set"] for f in files}) == written and all(len(f["sha256"]) == 64 for f in files)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(p.name for p in eval_dir.iterdir())
    for name in ("per_query.csv", "per_class.csv", "profile.csv", "report.csv"):
        assert (tmp_path / "out" / name).read_text() == (eval_dir / name).read_text(), name


# ---------------------------------------------------------------------------------------- the layout's checks
@pytest.fixture(scope="module")
def scored_split(tiny_bench, tmp_path_factory):
    """The test split's manifests (one repeat) and a folder of good embeddings of it: clean and repeat-0."""
    base = tmp_path_factory.mktemp("scored")
    options = _options(tiny_bench, base)
    bgbias.make_corrupted_sets("bench", options["root"], repeats=1, backgrounds=options["backgrounds"],
                               out=options["manifests"])
    items = split_items(open_dataset("bench", tiny_bench / "bench"), "test")
    ids = [layout_id(item.relpath) for item in items]
    rng = np.random.default_rng(1)
    for name in ("clean", "repeat-0"):
        write_set(base / "good", name, ids, rng.normal(size=(len(ids), 8)).astype(np.float32))
    return base, ids


def _options(bench: Path, base: Path) -> dict:
    return dict(root=bench / "bench", masks=bench / "masks", backgrounds=bench / "backgrounds",
                manifests=base / "manifests", repeats=1)


def _score(folder: Path, bench: Path, base: Path, **extra):
    return bgbias.score(folder, "bench", **{**_options(bench, base), **extra})


def _copy(base: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(base / "good", tmp_path / "embeddings"))


@pytest.mark.slow
def test_rows_in_any_order_and_either_format_score_alike_and_nothing_is_written(scored_split, tiny_bench,
                                                                                tmp_path):
    base, _ = scored_split
    first = _score(base / "good", tiny_bench, base)
    assert first.out_dir is None and first.files == {} and not (base / "good" / "report").exists()
    folder = _copy(base, tmp_path)
    with np.load(folder / "clean.npz") as stored:
        given, embeddings = stored["ids"].tolist(), stored["embeddings"]
    (folder / "clean.npz").unlink()
    write_set(folder, "clean", given[::-1], embeddings[::-1].astype(np.float64), npy=True)
    again = _score(folder, tiny_bench, base, out=tmp_path / "report")
    assert again.report.clean == first.report.clean and again.report.corrupted == first.report.corrupted
    assert again.report.method == "embeddings" and again.files["report_json"].is_file()
    assert {f["set"] for f in json.loads(again.files["report_json"].read_text())["embeddings"]["files"]} == {
        "clean", "repeat-0"}


def test_an_ids_file_with_a_byte_order_mark_scores_as_without(scored_split, tiny_bench, tmp_path):
    base, ids = scored_split
    first = _score(base / "good", tiny_bench, base)
    folder = _copy(base, tmp_path)
    with np.load(folder / "clean.npz") as stored:
        embeddings = stored["embeddings"]
    (folder / "clean.npz").unlink()
    write_set(folder, "clean", ids, embeddings, npy=True)
    listed = folder / "clean.ids.txt"
    listed.write_text(listed.read_text(encoding="utf-8"), encoding="utf-8-sig")
    assert _score(folder, tiny_bench, base).report.clean == first.report.clean


def test_l2_normalize_scores_scaled_rows_as_their_directions(scored_split, tiny_bench, tmp_path):
    base, ids = scored_split
    unit = _copy(base, tmp_path)
    scaled = Path(shutil.copytree(unit, tmp_path / "scaled"))
    rng = np.random.default_rng(2)
    for name in ("clean", "repeat-0"):
        with np.load(unit / f"{name}.npz") as stored:
            rows = stored["embeddings"] / np.linalg.norm(stored["embeddings"], axis=1, keepdims=True)
        write_set(unit, name, ids, rows.astype(np.float32))
        write_set(scaled, name, ids, (rows * rng.uniform(0.5, 20, (len(rows), 1))).astype(np.float32))
    as_given = _score(unit, tiny_bench, base)
    normalised = _score(scaled, tiny_bench, base, l2_normalize=True)
    assert normalised.report.clean.map_at_r == pytest.approx(as_given.report.clean.map_at_r, abs=1e-9)
    assert normalised.report.model_extra["embeddings"]["l2_normalized"] is True
    write_set(scaled, "clean", ids, np.zeros((len(ids), 8), dtype=np.float32))
    with pytest.raises(OptionError, match="rows are all zeros"):
        _score(scaled, tiny_bench, base, l2_normalize=True)


def _npy(array: np.ndarray) -> bytes:
    stream = io.BytesIO()
    np.save(stream, array)
    return stream.getvalue()


def _broken(name: str, ids: list[str], folder: Path) -> None:
    """Break the folder of good embeddings as ``name`` says."""
    rows = np.ones((len(ids), 8), dtype=np.float32)
    if name == "missing set":
        (folder / "repeat-0.npz").unlink()
    elif name == "extra id":
        write_set(folder, "repeat-0", [*ids, "images/nowhere"], np.ones((len(ids) + 1, 8), np.float32))
    elif name == "id with its suffix":
        write_set(folder, "repeat-0", [f"{ids[0]}.png", *ids[1:]], rows)
    elif name == "missing id":
        write_set(folder, "repeat-0", ids[1:], rows[1:])
    elif name == "duplicate id":
        write_set(folder, "repeat-0", [ids[1], *ids[1:]], rows)
    elif name == "width":
        write_set(folder, "repeat-0", ids, np.ones((len(ids), 4), dtype=np.float32))
    elif name == "not finite":
        rows[3, 2] = np.nan
        write_set(folder, "repeat-0", ids, rows)
    elif name == "not real":
        write_set(folder, "repeat-0", ids, rows.astype(np.complex64))
    elif name == "not 2-D":
        write_set(folder, "repeat-0", ids, rows[:, 0])
    elif name == "rows and ids":
        write_set(folder, "repeat-0", ids, rows[:-1], npy=True)
        (folder / "repeat-0.npz").unlink()
    elif name == "unknown file":
        (folder / "notes.txt").write_text("mine")
    elif name == "npy without ids":
        np.save(folder / "repeat-0.npy", rows)
        (folder / "repeat-0.npz").unlink()
    elif name == "two formats":
        write_set(folder, "repeat-0", ids, rows, npy=True)
    elif name == "other arrays":
        np.savez(folder / "repeat-0.npz", ids=np.array(ids), vectors=rows)
    elif name == "huge header npy":
        write_set(folder, "repeat-0", ids, rows, npy=True)
        (folder / "repeat-0.npz").unlink()
        (folder / "repeat-0.npy").write_bytes(forged_npy())
    elif name == "huge header npz":
        with zipfile.ZipFile(folder / "repeat-0.npz", "w") as archive:
            archive.writestr("ids.npy", _npy(np.array(ids)))
            archive.writestr("embeddings.npy", forged_npy())
    elif name == "pickled":
        np.save(folder / "repeat-0.npy", np.array([object()] * len(ids)), allow_pickle=True)
        (folder / "repeat-0.ids.txt").write_text("".join(f"{i}\n" for i in ids))
        (folder / "repeat-0.npz").unlink()


@pytest.mark.parametrize(("name", "file", "message", "fix"), [
    ("missing set", None, "1 sets have no embeddings file: repeat-0", "save them as <set>.npz"),
    ("extra id", "repeat-0.npz", r"1 ids are no image of the split \(first: images/nowhere\)",
     "without the file's"),
    ("id with its suffix", "repeat-0.npz", r"an id is the image's path without its suffix: .*, not .*\.png",
     "without the file's suffix"),
    ("missing id", "repeat-0.npz", "1 of the split's 12 images have no row", "embed every image"),
    ("duplicate id", "repeat-0.npz", "1 ids have more than one row", "exactly one row"),
    ("width", "repeat-0.npz", "set repeat-0 have 4 dimensions, those of set clean 8", "same model"),
    ("not finite", "repeat-0.npz", "1 rows hold NaN or infinite values", "must be finite"),
    ("not real", "repeat-0.npz", "dtype complex64, not real numbers", "finite floats"),
    ("not 2-D", "repeat-0.npz", r"shape \(12,\), not \(images, dimensions\)", "finite floats"),
    ("rows and ids", "repeat-0.ids.txt", "11 rows of embeddings for 12 ids", "one id per row"),
    ("unknown file", "notes.txt", "a file that is no set of its layout", "move this file out"),
    ("npy without ids", "repeat-0.npy", "has no ids beside it", "repeat-0.ids.txt"),
    ("two formats", None, "set repeat-0 has 2 files of embeddings", "one file per set"),
    ("other arrays", "repeat-0.npz", "holds the arrays ids, vectors", "np.savez"),
    ("pickled", "repeat-0.npy", "cannot be read as numpy data", "save it with numpy"),
    ("huge header npy", "repeat-0.npy", r"array repeat-0.npy declares shape \(12, 8589934592\)",
     "save it with numpy"),
    ("huge header npz", "repeat-0.npz", r"array embeddings declares shape \(12, 8589934592\)",
     "save it with numpy"),
])
def test_each_layout_error_names_the_file_and_the_fix(scored_split, tiny_bench, tmp_path, name, file, message,
                                                      fix):
    base, ids = scored_split
    folder = _copy(base, tmp_path)
    _broken(name, ids, folder)
    with pytest.raises(OptionError, match=message) as err:
        _score(folder, tiny_bench, base)
    assert fix in err.value.fix
    assert err.value.path == str(folder / file if file is not None else folder)


@pytest.mark.slow
def test_the_command_writes_into_the_folders_report_which_a_second_run_leaves_unread(scored_split,
                                                                                     tiny_bench, tmp_path):
    base, _ = scored_split
    folder = _copy(base, tmp_path)
    options = _options(tiny_bench, base)
    args = ["score", "--embeddings", str(folder), "--dataset", "bench", "--repeats", "1",
            *(arg for key in ("root", "masks", "backgrounds", "manifests")
              for arg in (f"--{key}", str(options[key])))]
    for _ in range(2):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
    assert f"report: {folder / 'report' / 'report.md'}" in result.output
    assert "embeddings on bench test (12 images" in result.output
    (folder / "repeat-0.npz").unlink()
    refused = CliRunner().invoke(main, args)
    assert refused.exit_code == 2 and "1 sets have no embeddings file: repeat-0" in refused.output


def test_sets_need_the_manifests_they_were_rendered_from(scored_split, tiny_bench, tmp_path):
    base, _ = scored_split
    with pytest.raises(AssetError, match="1 manifests of the sets to score are missing") as err:
        _score(base / "good", tiny_bench, base, manifests=tmp_path / "none")
    assert err.value.fix.startswith("pass manifests=, the folder") and not (tmp_path / "none").exists()


@pytest.mark.slow
@pytest.mark.required_in_ci
def test_parquet_is_read_where_pyarrow_is_installed(scored_split, tiny_bench, tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    base, _ = scored_split
    folder = _copy(base, tmp_path)
    with np.load(folder / "clean.npz") as stored:
        ids, rows = stored["ids"].tolist(), stored["embeddings"]
    (folder / "clean.npz").unlink()
    pq.write_table(pa.table({"id": ids, "embedding": list(rows)}), folder / "clean.parquet")
    expected = _score(base / "good", tiny_bench, base).report.clean
    assert _score(folder, tiny_bench, base).report.clean == expected


def test_a_parquet_file_without_pyarrow_is_refused_with_the_install(scored_split, tiny_bench, tmp_path,
                                                                     monkeypatch):
    base, _ = scored_split
    folder = _copy(base, tmp_path)
    (folder / "clean.npz").rename(folder / "clean.parquet")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # an import of it then fails, as where it is missing
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(OptionError, match="reading Parquet needs pyarrow") as err:
        _score(folder, tiny_bench, base)
    assert "pip install pyarrow" in err.value.fix and err.value.path == str(folder / "clean.parquet")


def test_images_whose_masks_show_nothing_are_flagged(scored_split, tiny_bench, tmp_path):
    from PIL import Image

    from bgbias.data.items import mask_path

    base, _ = scored_split
    masks = Path(shutil.copytree(tiny_bench / "masks", tmp_path / "masks"))
    item = split_items(open_dataset("bench", tiny_bench / "bench"), "test")[1]
    with Image.open(mask_path(item, masks)) as mask:
        Image.new("L", mask.size, 0).save(mask_path(item, masks))
    report = _score(_copy(base, tmp_path), tiny_bench, base, masks=masks).report
    assert report.empty_masks.ids == [item.id] and report.empty_masks.without is not None
    assert sum(row.empty_masks for row in report.per_class) == 1
    assert {row.name for row in report.per_class} == {f"stamp_{row.label:03d}" for row in report.per_class}
