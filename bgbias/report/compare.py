"""Several runs' attribution maps side by side on the same images: where does BGAugment move the attention?

Each ``bgbias explain`` keeps the maps of its gallery images (``maps/``); images are picked evenly over the
split, so runs explained with the same settings share them. This draws image | mask | one overlay per run,
captioned with each run's foreground score, in column order. A gallery compares one attribution (its label,
the end of the explain folder's name) across runs: by default SmoothGrad at its default options.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from bgbias.errors import OptionError
from bgbias.methods.attribution import DEFAULT_ATTRIBUTION


def compare_attributions(
    run_dirs: Sequence[str | os.PathLike[str]],
    dataset_key: str,
    split: str,
    out_path: str | os.PathLike[str],
    count: int = 8,
    label: str = DEFAULT_ATTRIBUTION,
) -> Path:
    """Write a gallery of up to ``count`` images that every run has a saved map for, and return its path.

    ``dataset_key``/``split``/``label`` name the explained set
    (``<run>/explain/<dataset key>-<split>-<label>/``, ``label`` naming the attribution and its options); the
    dataset is opened as the first run was trained on it (its ``config.json``), else at its default folder.
    """
    from bgbias.augment.gallery import evenly_spread
    from bgbias.data.items import default_masks_dir
    from bgbias.data.registry import open_dataset
    from bgbias.data.splits import split_items
    from bgbias.data.transforms import eval_geometry
    from bgbias.engine.model_folders import open_model_folder
    from bgbias.explain.heatmap import attribution_gallery
    from bgbias.explain.records import RECORDS_NAME, SCORE_LEDGER
    from bgbias.explain.run import (
        SCORES_CSV,
        SUMMARY_JSON,
        explain_dir,
        load_example,
        load_map,
        map_path,
        mask_files,
        score_text,
    )
    from bgbias.report.evaluation import run_label

    runs = [open_model_folder(path) for path in run_dirs]
    folders = [explain_dir(run.root, dataset_key, split, label) for run in runs]
    missing = [folder for folder in folders if not (folder / SCORES_CSV).is_file()]
    if missing:
        with_what = "" if label == DEFAULT_ATTRIBUTION else f" by {label}"
        how = "" if label == DEFAULT_ATTRIBUTION else f" with the attribution and options labelled {label}"
        raise OptionError(f"the run has no explanation of the {dataset_key} {split} split{with_what}",
                          path=missing[0],
                          fix=f"run: bgbias explain --checkpoint {missing[0].parents[1]}{how}")
    dataset_name = json.loads((folders[0] / SUMMARY_JSON).read_text(encoding="utf-8"))["dataset"]
    # External models record no training dataset: the first run's, else the dataset's default folder.
    first = next((run.trained_on for run in runs if run.trained_on is not None), None)
    if first is None:
        dataset, protocol, fold = open_dataset(dataset_name), "fixed", 0
    else:
        dataset = open_dataset(dataset_name, first.root if first.dataset == dataset_name else None)
        protocol, fold = first.protocol, first.fold
    items = split_items(dataset, split, protocol, fold)
    shared = [item for item in items if all(map_path(item, folder).is_file() for folder in folders)]
    if not shared:
        raise OptionError("the runs' explanations share no gallery image", path=folders[0],
                          fix="explain every run with the same --limit and --gallery settings")
    picked = [shared[i] for i in evenly_spread(len(shared), count)]
    labels = [run_label(run.method, bool(run.bgaugment)) for run in runs]
    scores = [SCORE_LEDGER.read(folder / RECORDS_NAME)[1] for folder in folders]
    geometry = eval_geometry(dataset.name)
    images, masks, maps = [], [], {label: [] for label in labels}
    captions = []
    for item, mask in zip(picked, mask_files(picked, default_masks_dir(dataset), dataset.name), strict=True):
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
    """``out_dir/foreground-<dataset>-<split>.png`` for every dataset that two or more of the runs explained
    with the attribution ``label`` (with shared gallery images) at the dataset's evaluation geometry,
    ``foreground-<dataset>-<split>-<label>.png`` for another label than the default; returns the galleries
    written."""
    from bgbias.data.transforms import eval_geometry
    from bgbias.explain.run import SCORES_CSV, explained_sets

    by_dataset: dict[str, list[Path]] = {}
    for run in map(Path, run_dirs):
        for explained in explained_sets(run, split):
            # A model explained at a size of its own (an external model's --input-size) has maps of another
            # size than the others' images: it is left out of the side-by-side galleries.
            own_size = explained.summary.get("geometry") != eval_geometry(
                explained.summary["dataset"]).as_dict()
            if explained.label == label and (explained.folder / SCORES_CSV).is_file() and not own_size:
                by_dataset.setdefault(explained.dataset_key, []).append(run)
    suffix = "" if label == DEFAULT_ATTRIBUTION else f"-{label}"
    out = Path(out_dir)
    return [
        compare_attributions(runs, dataset, split, out / f"foreground-{dataset}-{split}{suffix}.png",
                             label=label)
        for dataset, runs in sorted(by_dataset.items()) if len(runs) > 1
    ]
