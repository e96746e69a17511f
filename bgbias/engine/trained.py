"""A trained model back from its run folder: the method rebuilt from the saved configuration and spec, with
the selected (or last) checkpoint's weights. The backbone is built without pretrained weights (the
checkpoint holds them all), so evaluating needs only the run folder.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bgbias.assets.digest import sha256_file
from bgbias.engine.checkpoint import CheckpointError, load_checkpoint
from bgbias.engine.config import TrainConfig, load_run_config
from bgbias.engine.device import memory_format, resolve_amp, resolve_device
from bgbias.engine.method_model import MethodBacked
from bgbias.engine.run_dir import RunDir, latest_run, open_run_dir, read_trained_on
from bgbias.errors import OptionError
from bgbias.methods.base import MethodSpec
from bgbias.methods.embedding_model import TrainedOn
from bgbias.methods.registry import method_class
from bgbias.models.registry import build_backbone

if TYPE_CHECKING:
    import torch

    from bgbias.methods.base import Method

CHECKPOINTS = ("best", "last")


@dataclass
class TrainedModel(MethodBacked):
    """A run's method in eval mode on ``device``, and the checkpoint it came from."""

    run: RunDir
    config: TrainConfig
    method: Method
    checkpoint: Path
    checkpoint_sha256: str
    epoch: int
    device: torch.device
    amp_setting: str | None = None
    """The autocast setting it embeds under (``auto``, ``off``, ``bf16``, ``fp16``); None: its run's
    ``amp``."""

    @property
    def home(self) -> Path:
        return self.run.root

    @property
    def amp(self) -> torch.dtype | None:
        """The autocast dtype of :attr:`amp_setting` (default: the run's own ``amp``) on its device."""
        return resolve_amp(self.amp_setting or self.config.amp, self.device)

    def trained_on(self) -> TrainedOn:
        """The run's dataset, as its config and ``run.json`` record it."""
        recorded = read_trained_on(self.run)
        root = Path(self.config.root) if self.config.root is not None else None
        return TrainedOn(self.config.dataset, root, self.config.protocol, self.config.fold,
                         None if recorded is None else recorded.identity,
                         None if recorded is None else recorded.images, self.run.record)

    def describe(self) -> dict[str, Any]:
        return {
            "run": str(self.run.root),
            "method": self.config.method,
            "bgaugment": self.config.bgaugment.enabled,
            "seed": self.config.seed,
            "trained_on": self.config.dataset,
            "checkpoint": {
                "path": str(self.checkpoint), "sha256": self.checkpoint_sha256, "epoch": self.epoch,
            },
        }


def is_run_path(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a run's folder (``config.json`` inside) or a checkpoint in its ``checkpoints/``."""
    path = Path(path)
    return (path / "config.json").is_file() or (
        path.parent.name == "checkpoints" and (path.parent.parent / "config.json").is_file())


def load_trained(
    run: str | os.PathLike[str] | None = None,
    *,
    checkpoint: str = "best",
    device: str = "auto",
    runs: str | os.PathLike[str] | None = None,
    amp: str | None = None,
    memory_format: str | None = None,
) -> TrainedModel:
    """Rebuild the method of ``run`` (a run folder or its checkpoint file; default: the latest run) with its
    ``best`` or ``last`` weights, on ``device``, in eval mode; ``amp`` and ``memory_format`` default to the
    run's, and an ``amp`` this device cannot run is refused here."""
    if run is not None and Path(run).suffix == ".pt":
        run, checkpoint = Path(run).parent.parent, Path(run).stem
    if checkpoint not in CHECKPOINTS:
        raise OptionError(f"unknown checkpoint {checkpoint!r}",
                          fix=f"use one of {', '.join(CHECKPOINTS)} (a run's checkpoints/best.pt or last.pt)")
    run_dir = open_run_dir(run) if run is not None else latest_run(Path(runs) if runs is not None else None)
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
    if amp is not None:
        resolve_amp(amp, resolved)  # the run's own amp is resolved where it embeds, as it always was
    method = build_from_spec(config, state, path, memory_format).to(resolved).eval()
    return TrainedModel(run_dir, config, method, path, sha256_file(path), int(state["epoch"]), resolved, amp)


def build_from_spec(config: TrainConfig, state: dict[str, Any], path: Path,
                    layout: str | None = None) -> Method:
    """The method of ``config`` sized by the checkpoint's spec, with the checkpoint's weights, in the memory
    format ``layout`` (default: the configuration's ``model.memory_format``)."""
    if "spec" not in state or "model" not in state:
        raise CheckpointError("the checkpoint lacks the model or the spec it was built with", path=path,
                              fix="evaluate a checkpoint written by this version of bgbias train")
    method = configured_method(config, MethodSpec(**state["spec"]), layout=layout)
    try:
        method.load_state_dict(state["model"])
    except RuntimeError as err:
        raise CheckpointError(f"the checkpoint's weights do not fit {config.method} on "
                              f"{config.model.backbone}: {err}", path=path,
                              fix="keep the run's config.json as training wrote it") from None
    return method


def configured_method(config: TrainConfig, spec: MethodSpec, *, pretrained: bool = False,
                      layout: str | None = None) -> Method:
    """``config``'s method on its backbone (``pretrained``: with the configured weights), in the memory format
    ``layout`` (default: ``model.memory_format``), its stages compiled as configured."""
    model = config.model
    backbone = build_backbone(model.backbone, pretrained=pretrained and model.pretrained,
                              weights=model.weights if pretrained else None,
                              freeze_batchnorm=model.freeze_batchnorm)
    method = method_class(config.method)(backbone, spec)
    method.set_memory_format(memory_format(layout or model.memory_format))
    method.backbone.compile_stages(model.compile)
    return method
