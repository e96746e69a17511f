"""A folder of one model's reports, whoever trained the model: a run folder (``config.json``) or an external
model's home (``model.json``). ``bgbias report`` puts both in one table."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from bgbias.engine.config import load_run_config
from bgbias.engine.external_model import EXTERNAL_FOLDER, MODEL_RECORD, read_model_record
from bgbias.errors import OptionError
from bgbias.methods.embedding_model import TrainedOn


@dataclass(frozen=True)
class ModelFolder:
    """A model's folder: its row name in tables, its BGAugment setting (None: unknown, for a model bgbias did
    not train), the dataset it was trained on where bgbias knows it, and how a command names the model
    (``--checkpoint RUN``, or ``--model SPEC --out HOME`` with its input options)."""

    root: Path
    method: str
    bgaugment: bool | None
    trained_on: TrainedOn | None
    model_options: str

    @property
    def evaluate_command(self) -> str:
        return f"bgbias eval {self.model_options} --corrupted" + self._input_note

    def explain_command(self, extra: str = "") -> str:
        """The ``bgbias explain`` command line of this model, ``extra`` options added."""
        return f"bgbias explain {self.model_options}{extra}" + self._input_note

    @property
    def _input_note(self) -> str:
        return "" if self.trained_on is not None else " (with its input options)"


def open_model_folder(path: str | os.PathLike[str]) -> ModelFolder:
    """The run folder or external model's home at ``path``; anything else is an ``OptionError``."""
    root = Path(path)
    if (root / "config.json").is_file():
        config = load_run_config(root / "config.json")
        trained = TrainedOn(config.dataset, Path(config.root) if config.root is not None else None,
                            config.protocol, config.fold)
        return ModelFolder(root, config.method, config.bgaugment.enabled, trained, f"--checkpoint {root}")
    record = read_model_record(root / MODEL_RECORD)
    if record is not None:
        return ModelFolder(root, record.label, None, None, f"--model {record.spec} --out {root}")
    raise OptionError("this is neither a run folder (config.json) nor an external model's folder "
                      "(model.json)", path=root, fix="pass a folder made by bgbias train, or by bgbias eval "
                                                     "--model")


def evaluated_folders(runs: str | os.PathLike[str], split: str) -> list[Path]:
    """The folders under ``runs`` with an evaluation report of ``split``: runs (``runs/<run>``) and external
    models in their default homes (``runs/external/<model>``), sorted."""
    runs = Path(runs)
    reports = [*runs.glob(f"*/eval/*-{split}/report.json"),
               *runs.glob(f"{EXTERNAL_FOLDER}/*/eval/*-{split}/report.json")]
    return sorted({report.parents[2] for report in reports})
