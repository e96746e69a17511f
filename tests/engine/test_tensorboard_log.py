"""`--set log.tensorboard=true`: every epoch's row as TensorBoard scalars, a clear stop without the package,
and run folders written before the setting existed still load."""

from __future__ import annotations

import sys

import pytest

from bgbias.engine.tensorboard_log import FOLDER, scalar_tag
from bgbias.engine.training import train
from bgbias.errors import OptionError
from tests.conftest import tiny_config


def test_columns_become_tags_grouped_by_prefix():
    assert scalar_tag("train_loss") == "train/loss"
    assert scalar_tag("val_corrupted_map_at_r") == "val/corrupted_map_at_r"
    assert scalar_tag("env_passes") == "run/env_passes"


@pytest.mark.slow
def test_a_run_writes_every_epoch_as_scalars(tiny_bench, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = train(tiny_config(tiny_bench, "triplet", "log.tensorboard=true"), runs=tmp_path, progress=False,
                   echo=False)
    events = EventAccumulator(str(result.run.root / FOLDER))
    events.Reload()
    assert [e.step for e in events.Scalars("val/map_at_r")] == [0, 1, 2]
    assert [e.value for e in events.Scalars("val/map_at_r")] == pytest.approx(
        [row["val_map_at_r"] for row in result.history])
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2]


def test_without_the_package_the_run_stops_before_its_folder(tiny_bench, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # importing it raises ImportError
    with pytest.raises(OptionError, match="tensorboard package") as error:
        train(tiny_config(tiny_bench, "triplet", "log.tensorboard=true"), runs=tmp_path, progress=False,
              echo=False)
    assert "bgbias[tensorboard]" in error.value.fix
    assert not tmp_path.exists() or not any(tmp_path.iterdir())
