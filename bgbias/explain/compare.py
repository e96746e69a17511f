"""Several runs' attribution maps side by side on the same images: where does BGAugment move the attention?

Each ``bgbias explain`` keeps the maps of its gallery images (``maps/``); images are picked evenly over the
split, so runs explained with the same settings share them. This draws image | mask | one overlay per run,
captioned with each run's foreground score, in column order.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from bgbias.errors import OptionError


def compare_attributions(
    run_dirs: Sequence[str | os.PathLike[str]],
    dataset_key: str,
    split: str,
    out_path: str | os.PathLike[str],
    count: int = 8,
) -> Path:
    """Write a gallery of up to ``count`` images that every run has a saved map for, and return its path.

    ``dataset_key``/``split`` name the explained set (``<run>/explain/<dataset key>-<split>/``); the dataset
    is opened as the first run was trained on it (its ``config.json``), else at its default folder.
    """
    from bgbias.augment.gallery import evenly_spread
    from bgbias.data.items import default_masks_dir
    from bgbias.data.registry import open_dataset
    from bgbias.data.splits import split_items
    from bgbias.data.transforms import eval_geometry
    from bgbias.engine.config import load_run_config
    from bgbias.engine.run_dir import open_run_dir
    from bgbias.explain.heatmap import attribution_gallery
    from bgbias.explain.records import RECORDS_NAME, SCORE_LEDGER
    from bgbias.explain.run import (
        SCORES_CSV,
        SUMMARY_JSON,
        load_example,
        load_map,
        map_path,
        mask_files,
        score_text,
    )
    from bgbias.report.evaluation import run_label

    runs = [open_run_dir(path) for path in run_dirs]
    configs = [load_run_config(run.config) for run in runs]
    folders = [run.explain_dir(dataset_key, split) for run in runs]
    missing = [folder for folder in folders if not (folder / SCORES_CSV).is_file()]
    if missing:
        raise OptionError(f"the run has no explanation of the {dataset_key} {split} split", path=missing[0],
                          fix=f"run: bgbias explain --checkpoint {missing[0].parents[1]}")
    dataset_name = json.loads((folders[0] / SUMMARY_JSON).read_text(encoding="utf-8"))["dataset"]
    first = configs[0]
    dataset = open_dataset(dataset_name, first.root if first.dataset == dataset_name else None)
    items = split_items(dataset, split, first.protocol, first.fold)
    shared = [item for item in items if all(map_path(item, folder).is_file() for folder in folders)]
    if not shared:
        raise OptionError("the runs' explanations share no gallery image", path=folders[0],
                          fix="explain every run with the same --limit and --gallery settings")
    picked = [shared[i] for i in evenly_spread(len(shared), count)]
    labels = [run_label(c.method, c.bgaugment.enabled) for c in configs]
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
    run_dirs: Sequence[str | os.PathLike[str]], split: str, out_dir: str | os.PathLike[str]
) -> list[Path]:
    """``out_dir/foreground-<dataset>-<split>.png`` for every dataset that two or more of the runs explained
    (with shared gallery images); returns the galleries written."""
    from bgbias.explain.run import SCORES_CSV

    by_dataset: dict[str, list[Path]] = {}
    for run in map(Path, run_dirs):
        for scores in sorted(run.glob(f"explain/*-{split}/{SCORES_CSV}")):
            dataset = scores.parent.name.removesuffix(f"-{split}")
            by_dataset.setdefault(dataset, []).append(run)
    return [
        compare_attributions(runs, dataset, split, Path(out_dir) / f"foreground-{dataset}-{split}.png")
        for dataset, runs in sorted(by_dataset.items()) if len(runs) > 1
    ]
