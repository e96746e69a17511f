"""Several runs' attribution maps side by side on the same images: where does BGAugment move the attention?
image | mask | one overlay per run, captioned with each run's foreground score, for one attribution (its
label, the end of the explain folder's name; by default SmoothGrad at its default options).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from bgbias.attribution.heatmap import attribution_gallery
from bgbias.attribution.outputs import (
    SCORES_CSV,
    explain_dir,
    explained_sets,
    load_map,
    map_path,
    read_summary,
    score_text,
)
from bgbias.attribution.records import EXPLAIN_AGAIN, read_results
from bgbias.attribution.scoring import load_example, mask_files
from bgbias.corrupted.gallery import evenly_spread
from bgbias.data.items import default_masks_dir
from bgbias.data.registry import open_dataset
from bgbias.data.splits import split_items
from bgbias.data.transforms import eval_geometry
from bgbias.engine.model_folders import open_model_folder
from bgbias.errors import DatasetError, ImageError, OptionError, RecordError
from bgbias.measurement.record import run_label
from bgbias.methods.attribution import DEFAULT_ATTRIBUTION


def compare_attributions(
    run_dirs: Sequence[str | os.PathLike[str]],
    dataset_key: str,
    split: str,
    out_path: str | os.PathLike[str],
    count: int = 8,
    label: str = DEFAULT_ATTRIBUTION,
) -> Path:
    """Write a gallery of up to ``count`` images that every run has a saved map for
    (``<run>/explain/<dataset key>-<split>-<label>/``), and return its path; the images and masks are the ones
    the first run's explanation recorded."""
    runs = [open_model_folder(path) for path in run_dirs]
    folders = [explain_dir(run.root, dataset_key, split, label) for run in runs]
    missing = [(run, folder) for run, folder in zip(runs, folders, strict=True)
               if not (folder / SCORES_CSV).is_file()]
    if missing:
        with_what = "" if label == DEFAULT_ATTRIBUTION else f" by {label}"
        how = "" if label == DEFAULT_ATTRIBUTION else f" (with the attribution and options labelled {label})"
        run, folder = missing[0]
        raise OptionError(f"the run has no explanation of the {dataset_key} {split} split{with_what}",
                          path=folder, fix=f"run: {run.explain_command()}{how}")
    summary = read_summary(folders[0])
    results = [read_results(folder) for folder in folders]
    settings, scores = results[0][0], [by_id for _, by_id in results]
    first = next((run.trained_on for run in runs if run.trained_on is not None), None)
    protocol, fold = (first.protocol, first.fold) if first is not None else ("fixed", 0)
    try:
        dataset = open_dataset(summary.dataset, summary.dataset_root)
    except DatasetError as error:
        raise DatasetError(error.problem, path=error.path,
                           fix=f"the explanation in {folders[0]} was made of this dataset: put it back "
                               f"there, or {EXPLAIN_AGAIN}") from None
    items = split_items(dataset, split, protocol, fold)
    shared = [item for item in items if all(map_path(item, folder).is_file() for folder in folders)]
    if not shared:
        raise OptionError("the runs' explanations share no gallery image", path=folders[0],
                          fix="explain every run with the same --limit and --gallery settings")
    picked = [shared[i] for i in evenly_spread(len(shared), count)]
    labels = [run_label(run.method, bool(run.bgaugment)) for run in runs]
    lacking = [(folder, item) for folder, by_id in zip(folders, scores, strict=True) for item in picked
               if item.id not in by_id]
    if lacking:
        folder, item = lacking[0]
        raise RecordError(f"the explanation's ledger has no score of the gallery image {item.id}",
                          path=folder, fix=EXPLAIN_AGAIN)
    masks_dir = Path(settings.masks_dir) if settings.masks_dir else default_masks_dir(dataset)
    try:
        mask_list = mask_files(picked, masks_dir, dataset.name)
    except (ImageError, DatasetError) as error:
        again = runs[0].explain_command(" --masks DIR --force")
        fix = (f"the explanation was scored against the masks in {masks_dir}: put them back there, or "
               f"explain the model again with the masks it should use: {again}")
        raise type(error)(error.problem, path=error.path, fix=fix) from None
    geometry = eval_geometry(dataset.name)
    images, masks, maps = [], [], {label: [] for label in labels}
    captions = []
    for item, mask in zip(picked, mask_list, strict=True):
        image, soft_mask = load_example(item, mask, geometry, dataset.name)
        images.append(image)
        masks.append(soft_mask)
        for label, folder in zip(labels, folders, strict=True):
            maps[label].append(load_map(map_path(item, folder)))
        # The id's last two parts name the picture; the scores follow the overlay columns' order.
        short_id = "/".join(item.relpath.parts[-2:])
        captions.append(f"{short_id}  scores " + " | ".join(score_text(s[item.id].score) for s in scores))
    return attribution_gallery(Path(out_path), images, masks, maps, captions)


def compare_runs(
    run_dirs: Sequence[str | os.PathLike[str]],
    split: str,
    out_dir: str | os.PathLike[str],
    label: str = DEFAULT_ATTRIBUTION,
) -> list[Path]:
    """``out_dir/foreground-<dataset>-<split>[-<label>].png`` for every dataset that two or more of the runs
    explained with the attribution ``label``; returns the galleries written."""
    by_dataset: dict[str, list[Path]] = {}
    for run in map(Path, run_dirs):
        for explained in explained_sets(run, split):
            # A model explained at a size of its own (an external model's --input-size) has maps of another
            # size than the others' images: it is left out of the side-by-side galleries.
            own_size = explained.summary.geometry != eval_geometry(explained.summary.dataset).as_dict()
            if explained.label == label and (explained.folder / SCORES_CSV).is_file() and not own_size:
                by_dataset.setdefault(explained.dataset_key, []).append(run)
    suffix = "" if label == DEFAULT_ATTRIBUTION else f"-{label}"
    out = Path(out_dir)
    return [
        compare_attributions(runs, dataset, split, out / f"foreground-{dataset}-{split}{suffix}.png",
                             label=label)
        for dataset, runs in sorted(by_dataset.items()) if len(runs) > 1
    ]
