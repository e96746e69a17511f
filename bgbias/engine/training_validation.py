"""Validation after every epoch and the choice of the best checkpoint: the image sets scored, their
MAP@R, and early stopping."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from bgbias.corrupted.corrupted_images import CorruptedImages
from bgbias.corrupted.manifests import load_manifest, make_corrupted_manifests, manifest_name
from bgbias.data.eval_images import EvalImages
from bgbias.data.transforms import eval_geometry
from bgbias.engine import distributed
from bgbias.engine.checkpoint import save_checkpoint
from bgbias.engine.config import TrainConfig
from bgbias.engine.embedding import embed_images
from bgbias.engine.run_dir import RunDir, RunStatus
from bgbias.engine.training_build import RunInputs
from bgbias.engine.training_records import TrainingState
from bgbias.retrieval.metrics import score_embeddings

if TYPE_CHECKING:
    from bgbias.data.items import Item


def validation_sets(config, inputs: RunInputs, run, dist, fresh) -> dict[str, Any] | None:
    """The image sets scored after every epoch, by metrics-column prefix: ``val``, clean, and
    ``val_corrupted``, the run's fixed corrupted set (train pool), when it selects on it; with
    ``schedule.watch_test`` (never selected on) ``test`` and ``test_corrupted``, the first corrupted repeat
    ``bgbias eval`` scores (test pool, seed 0)."""
    if not dist.is_main:
        return None

    dataset, geometry = inputs.dataset, eval_geometry(inputs.dataset.name)
    backgrounds = Path(config.bgaugment.backgrounds) if config.bgaugment.backgrounds else None

    def corrupted(split: str, items: list[Item], seed: int, folder: Path) -> Any:
        path = folder / manifest_name(0)
        if fresh or not path.is_file():
            make_corrupted_manifests(dataset, split, repeats=1, seed=seed, backgrounds=backgrounds,
                                     out_dir=folder, protocol=config.protocol, fold=config.fold)
        manifest = load_manifest(path, dataset, backgrounds)
        return CorruptedImages(items, manifest, inputs.masks_dir, dataset.name)

    sets: dict[str, Any] = {"val": EvalImages(inputs.val_items, geometry)}
    if config.monitor == "corrupted":
        sets["val_corrupted"] = corrupted("val", inputs.val_items, config.seed, run.corrupted_val)
    if inputs.test_items:
        sets["test"] = EvalImages(inputs.test_items, geometry)
        sets["test_corrupted"] = corrupted("test", inputs.test_items, 0, run.corrupted_test)
    return sets


def validate_sets(method, validation, config, device, amp, progress, dist) -> dict[str, float]:
    """MAP@R, R-precision and P@1 of every validation set, ranked as evaluation ranks; rank 0 only."""
    row: dict[str, float] = {}
    if dist.is_main:
        for prefix, images in validation.items():
            state, labels = embed_images(
                method, images, device, batch_size=2 * config.data.batch_size, workers=config.data.workers,
                amp=amp, progress=progress, desc=prefix,
            )
            scores = score_embeddings(state, labels, retrieval=method.retrieval())
            for name, value in scores.as_dict().items():
                row[f"{prefix}_{name}"] = value
    return distributed.broadcast(dist, row)


def select_checkpoint(state: TrainingState, row: dict[str, Any], config: TrainConfig, method, run: RunDir,
                      dist) -> None:
    """Keep the best checkpoint by the monitored MAP@R; stop early after ``patience`` epochs without gain."""
    key = "val_corrupted_map_at_r" if config.monitor == "corrupted" else "val_map_at_r"
    value = row[key]
    if value > state.best_value:
        state.best_value, state.best_epoch, state.bad_epochs = value, state.epoch, 0
        if dist.is_main:
            save_checkpoint(run.best, {"epoch": state.epoch, "monitor": key, "value": value,
                                       "spec": method.spec.saved(), "model": method.state_dict()})
    else:
        state.bad_epochs += 1
        if state.bad_epochs >= config.schedule.patience:
            state.status = RunStatus.STOPPED_EARLY
