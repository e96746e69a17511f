"""A trained model back from its run folder: the method rebuilt from the saved configuration and spec, with
the selected (or last) checkpoint's weights, ready to embed.

The backbone is built without pretrained weights (the checkpoint holds all of them), so evaluating needs no
download and no ImageNet file, only the run folder.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bgbias.engine.checkpoint import CheckpointError, load_checkpoint
from bgbias.engine.config import TrainConfig, load_run_config
from bgbias.engine.run_dir import RunDir, latest_run, open_run_dir, read_trained_on
from bgbias.errors import DatasetError, OptionError

if TYPE_CHECKING:
    import torch

    from bgbias.data.items import Dataset, Item
    from bgbias.methods.base import Method

CHECKPOINTS = ("best", "last")


@dataclass
class TrainedModel:
    """A run's method in eval mode on ``device``, and which checkpoint it came from."""

    run: RunDir
    config: TrainConfig
    method: Method
    checkpoint: Path
    checkpoint_sha256: str
    epoch: int
    device: torch.device

    def open_split(
        self, split: str, dataset_name: str | None = None, root: str | os.PathLike[str] | None = None
    ) -> tuple[Dataset, list[Item]]:
        """A split of a dataset (default: the one the run trained on, at its folder) under the run's protocol
        and fold, for evaluating or explaining the model on it.

        Without ``dataset_name`` and ``root`` the dataset must still be the one the run trained on (the image
        ids and labels its ``run.json`` recorded): a changed or replaced folder is a ``DatasetError``, never a
        score of another dataset. Naming a dataset or root is how a user asks for another one on purpose.
        """
        from bgbias.data.registry import open_dataset
        from bgbias.data.splits import split_items

        asked_for_other = root is not None or dataset_name not in (None, self.config.dataset)
        dataset_name = dataset_name or self.config.dataset
        if root is None and dataset_name == self.config.dataset:
            root = self.config.root
        dataset = open_dataset(dataset_name, root)
        trained_on = self.trained_on()
        if not asked_for_other and trained_on is not None and dataset.identity() != trained_on["identity"]:
            raise DatasetError(
                f"the {dataset.name} dataset at {dataset.root} is not the one this run was trained on "
                f"({len(dataset.items())} images now, {trained_on['images']} then)",
                path=self.run.record,
                fix="restore the dataset the run was trained on, or pass --dataset/--root to score the "
                    "model on this one on purpose",
            )
        return dataset, split_items(dataset, split, self.config.protocol, self.config.fold)

    def trained_on(self) -> dict[str, Any] | None:
        """The dataset record of ``run.json`` (name, root, identity, images); None for a run that has none."""
        return read_trained_on(self.run)

    def describe(self) -> dict[str, Any]:
        """What a report records about the model: run, method, BGAugment and the checkpoint's identity."""
        return {
            "run": str(self.run.root),
            "method": self.config.method,
            "bgaugment": self.config.bgaugment.enabled,
            "trained_on": self.config.dataset,
            "checkpoint": {
                "path": str(self.checkpoint), "sha256": self.checkpoint_sha256, "epoch": self.epoch,
            },
        }


def resolve_run(run: str | os.PathLike[str] | None, runs: str | os.PathLike[str] | None = None) -> RunDir:
    """``run`` as a run folder, or the latest run of ``runs`` (default ./runs) when it is None."""
    if run is None:
        return latest_run(Path(runs) if runs is not None else None)
    return open_run_dir(run)


def load_trained(
    run: str | os.PathLike[str] | None = None,
    *,
    checkpoint: str = "best",
    device: str = "auto",
    runs: str | os.PathLike[str] | None = None,
) -> TrainedModel:
    """Rebuild the method of ``run`` (default: the latest run) with the weights of its ``best`` or ``last``
    checkpoint, on ``device``, in eval mode. ``run`` may also name the checkpoint file itself
    (``<run>/checkpoints/last.pt``)."""
    from bgbias.assets.digest import sha256_file
    from bgbias.engine.device import resolve_device

    if run is not None and Path(run).suffix == ".pt":
        run, checkpoint = Path(run).parent.parent, Path(run).stem
    if checkpoint not in CHECKPOINTS:
        raise OptionError(f"unknown checkpoint {checkpoint!r}",
                          fix=f"use one of {', '.join(CHECKPOINTS)} (a run's checkpoints/best.pt or last.pt)")
    run_dir = resolve_run(run, runs)
    config = load_run_config(run_dir.config)
    path = run_dir.best if checkpoint == "best" else run_dir.last
    if not path.is_file():
        raise CheckpointError(
            f"the run has no {checkpoint} checkpoint yet",
            path=path,
            fix=f"finish the run with: bgbias train --resume {run_dir.root}"
            if checkpoint == "last" or run_dir.last.is_file()
            else "train for at least one epoch first",
        )
    state = load_checkpoint(path)
    resolved = resolve_device(device)
    method = build_from_spec(config, state, path).to(resolved).eval()
    return TrainedModel(run_dir, config, method, path, sha256_file(path), int(state["epoch"]), resolved)


def build_from_spec(config: TrainConfig, state: dict[str, Any], path: Path) -> Method:
    """The method of ``config`` sized by the checkpoint's spec, with the checkpoint's weights."""
    from bgbias.methods.base import MethodSpec
    from bgbias.methods.registry import method_class
    from bgbias.models.registry import build_backbone

    if "spec" not in state or "model" not in state:
        raise CheckpointError("the checkpoint lacks the model or the spec it was built with", path=path,
                              fix="evaluate a checkpoint written by this version of bgbias train")
    backbone = build_backbone(config.model.backbone, pretrained=False,
                              freeze_batchnorm=config.model.freeze_batchnorm)
    method = method_class(config.method)(backbone, MethodSpec(**state["spec"]))
    try:
        method.load_state_dict(state["model"])
    except RuntimeError as err:
        raise CheckpointError(f"the checkpoint's weights do not fit {config.method} on "
                              f"{config.model.backbone}: {err}", path=path,
                              fix="keep the run's config.json as training wrote it") from None
    return method
